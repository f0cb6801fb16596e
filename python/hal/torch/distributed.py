"""hal's collectives as a torch.distributed backend: ``init_process_group("hal")``.

``import hal.torch`` registers the backend ``"hal"`` for the ``cpu`` and
``cuda`` devices, so DistributedDataParallel, FSDP2 (``fully_shard``),
DeviceMesh and every ``torch.distributed`` call run on hal's engines::

    import torch.distributed as dist, hal.torch
    dist.init_process_group("hal")          # under torchrun, halrun, mpirun or srun
    dist.all_reduce(torch.ones(4))
    print(hal.torch.distributed.describe())  # which engine serves which device, and why

Rendezvous is torch's: the backend meets on the (prefixed) store torch hands
it, so no second port is opened. The engine is hal's choice per device: on
CPU tensors the host backend's (MPI when launched by mpirun or srun, else
Gloo, with shared memory beside it when every rank is on this host;
``HAL_COLL_ENGINE`` or the config file override it); on CUDA tensors
the hal GPU device that is the same physical device (by UUID or PCI bus id),
with hal's NCCL-family engine, on torch's current stream. A communicator is
made per device type at the first collective on it; all ranks make it in the
same order because they issue the same collectives.

CPU operations run in order on one thread per process group, so that
``async_op=True`` (and DDP's gradient buckets) overlap with the caller; a
``Work`` wraps a ``torch.futures.Future`` whose value is the output tensors.
GPU operations are enqueued on torch's current stream and complete in stream
order, as NCCL's do.

What hal cannot do raises at the call, naming the op, the dtype or the reduce
op and what is supported: PREMUL_SUM, a reduce op on a dtype it does not
apply to, complex MIN/MAX/PRODUCT, dtypes outside f32, f64, f16, bf16, int8,
uint8, int32, int64, bool and complex64/128, and ``recv`` from any source.
BAND/BOR/BXOR (integers and bool) have no engine reduction in hal; they run
as an all_gather and a local reduction in torch, which is exact.
"""

from __future__ import annotations

import atexit
import datetime
import functools
import gc
import os
import queue
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as _c10d  # the option structs, some of which torch.distributed does not export

import hal
from hal import _hal

__all__ = ["BACKEND_NAME", "ProcessGroupHal", "describe", "register"]

BACKEND_NAME = "hal"

_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.int8: "i8", torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64", torch.bool: "u8"}
_SUPPORTED_DTYPES = "float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool, complex64, complex128"
_ENGINE_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.PRODUCT: "prod",
               dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max"}
# bool has no arithmetic: OR for SUM and MAX, AND for PRODUCT and MIN (as torch's gloo computes them), on uint8 0/1.
_BOOL_OPS = {dist.ReduceOp.SUM: "max", dist.ReduceOp.MAX: "max", dist.ReduceOp.PRODUCT: "min",
             dist.ReduceOp.MIN: "min"}
_BITWISE_OPS = {dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
                dist.ReduceOp.BXOR: torch.bitwise_xor}
_OP_NAMES = "SUM, AVG, PRODUCT, MIN, MAX, and BAND, BOR, BXOR on integer and bool tensors"


def _op_name(op) -> str:
    return str(getattr(op, "op", op)).split(".")[-1]


def _error(message: str) -> hal.InvalidArgumentError:
    return hal.InvalidArgumentError(f"torch.distributed backend 'hal': {message}")


def _unsupported(message: str) -> hal.UnsupportedError:
    return hal.UnsupportedError(f"torch.distributed backend 'hal': {message}")


# ------------------------------------------------------------------ reductions

class _Reduction:
    """How one reduce op runs on one dtype: an engine op name, or a torch bitwise function over an all_gather."""

    def __init__(self, engine_op: Optional[str], bitwise: Optional[Callable] = None):
        self.engine_op = engine_op
        self.bitwise = bitwise


def _reduction(operation: str, op, dtype: torch.dtype) -> _Reduction:
    key = getattr(op, "op", op)
    if key in _BITWISE_OPS:
        if dtype.is_floating_point or dtype.is_complex:
            raise _unsupported(f"{operation}: {_op_name(op)} applies to integer and bool tensors, not {dtype}")
        return _Reduction(None, _BITWISE_OPS[key])
    if key == dist.ReduceOp.PREMUL_SUM:
        raise _unsupported(f"{operation}: PREMUL_SUM is not supported by hal's engines; supported: {_OP_NAMES}")
    if dtype == torch.bool:
        if key not in _BOOL_OPS:
            raise _unsupported(f"{operation}: {_op_name(op)} on bool tensors; supported: SUM, PRODUCT, MIN, MAX, "
                               "BAND, BOR, BXOR")
        return _Reduction(_BOOL_OPS[key])
    if key not in _ENGINE_OPS:
        raise _unsupported(f"{operation}: reduce op {_op_name(op)} is not supported; supported: {_OP_NAMES}")
    if dtype.is_complex and key not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        raise _unsupported(f"{operation}: {_op_name(op)} on complex tensors ({dtype}); complex tensors take SUM and "
                           "AVG only (as in torch)")
    return _Reduction(_ENGINE_OPS[key])


def _engine_view(tensor: torch.Tensor, operation: str) -> torch.Tensor:
    """The tensor as hal's engines see it: complex as its real pairs, bool as uint8 (same bytes, no copy)."""
    if tensor.is_complex():
        return torch.view_as_real(tensor)
    if tensor.dtype == torch.bool:
        return tensor.view(torch.uint8)
    if tensor.dtype not in _DTYPES:
        raise _unsupported(f"{operation}: dtype {tensor.dtype} is not supported; supported: {_SUPPORTED_DTYPES}")
    return tensor


def _check_dtype(tensor: torch.Tensor, operation: str) -> None:
    if not tensor.is_complex() and tensor.dtype not in _DTYPES:
        raise _unsupported(f"{operation}: dtype {tensor.dtype} is not supported; supported: {_SUPPORTED_DTYPES}")


class _Dense:
    """A contiguous stand-in for a tensor that is not, copied back by finish() (collectives move dense runs)."""

    def __init__(self, tensor: torch.Tensor, read: bool = True):
        self.tensor = tensor
        self.dense = tensor if tensor.is_contiguous() else (tensor.contiguous() if read else torch.empty_like(
            tensor, memory_format=torch.contiguous_format))

    def finish(self) -> None:
        if self.dense is not self.tensor:
            self.tensor.copy_(self.dense)


# ------------------------------------------------------------------ the store

def _store_adapter(store: "dist.Store", prefix: str):
    """A hal.Store over torch's store (under prefix): set, get with a timeout (None when the key did not come), add."""

    def set_(key: str, value: bytes) -> None:
        store.set(prefix + key, value)

    def get(key: str, timeout: float) -> Optional[bytes]:
        full = prefix + key
        if timeout <= 0:
            return store.get(full) if store.check([full]) else None
        try:
            store.wait([full], datetime.timedelta(seconds=timeout))
        except dist.DistStoreError:
            return None  # torch's wait timed out; hal words the timeout itself
        return store.get(full)

    def add(key: str, delta: int) -> int:
        return store.add(prefix + key, delta)

    return _hal._CallbackStore(set_, get, add)


# ------------------------------------------------------------------ the worker

class _Worker:
    """Runs a process group's CPU operations in submission order on one thread; each completes a Future.

    A blocking call (torch's async_op=False) made while nothing is queued runs on the caller's thread instead:
    the caller would only wait for the hand-off, which costs more than a small collective."""

    def __init__(self, name: str):
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._execution = threading.Lock()  # one operation at a time, in submission order
        self._pending = 0  # submitted and not finished, under _count_lock
        self.busy_seconds = 0.0  # time spent running operations (torch.profiler does not see this thread's)
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, run: Callable[[], List[torch.Tensor]], asynchronous: bool) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        with self._count_lock:
            inline = not asynchronous and self._pending == 0
            self._pending += 1
        if inline:
            self._run(run, future)
        else:
            self._queue.put((run, future))
        return future

    def stop(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self, run, future) -> None:
        with self._execution:
            start = time.perf_counter()
            try:
                result = run()
            except BaseException as error:  # noqa: BLE001 (every failure belongs to the waiting caller)
                result, failure = None, error
            else:
                failure = None
            self.busy_seconds += time.perf_counter() - start
        with self._count_lock:
            self._pending -= 1
        if failure is not None:
            # Without its frames: they hold the communicator, and the Future outlives the call in torch's hands.
            future.set_exception(failure.with_traceback(None))
        else:
            future.set_result(result)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._run(*item)


def _completed(value) -> torch.futures.Future:
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(value)
    return future


# ------------------------------------------------------------------ the process group

def _first_device(arguments) -> Optional[torch.device]:
    for argument in arguments:
        if isinstance(argument, torch.Tensor):
            return argument.device
        if isinstance(argument, (list, tuple)):
            found = _first_device(argument)
            if found is not None:
                return found
    return None


def _delegable(method):
    """Runs the operation on torch's own backend for a device the backend string gave to another backend
    ("cpu:gloo,cuda:hal": CPU tensors to gloo), else on hal."""
    name = method.__name__

    @functools.wraps(method)
    def operation(self, *args, **kwargs):
        if self._delegates:
            device = _first_device(args)
            delegate = self._delegates.get(device.type) if device is not None else None
            if delegate is not None:
                return getattr(delegate, name)(*args, **kwargs)
        return method(self, *args, **kwargs)
    # Under torch.compile the operation runs as it is (a graph break): its queue, locks and hal calls are not
    # graph material.
    return torch.compiler.disable(operation)


_live_groups: "weakref.WeakSet" = weakref.WeakSet()


class ProcessGroupHal(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run on hal.Communicator (one per device type)."""

    def __init__(self, store: "dist.Store", rank: int, size: int, timeout: datetime.timedelta,
                 delegates: Optional[Dict[str, "dist.Backend"]] = None):
        super().__init__(rank, size)
        # torch's backends for the devices a mixed backend string gives to another backend, by device type
        self._delegates = dict(delegates or {})
        self._store = store
        self._timeout = timeout.total_seconds() if timeout is not None else 1800.0
        self._communicators: Dict[Tuple[str, int], hal.Communicator] = {}
        self._cuda_streams: Dict[Tuple[hal.Device, int], hal.Stream] = {}
        self._lock = threading.Lock()
        self._worker = _Worker(f"hal.torch.distributed rank {rank}")
        self._closed = False
        self._group_name = self._group_description = ""
        _live_groups.add(self)

    # -------------------------------------------------- identity

    def getBackendName(self) -> str:  # noqa: N802 (torch's names, called from C++)
        return BACKEND_NAME

    # torch keeps a group's name and description on its C++ backends, which a Python group has none of.
    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        return self._group_name

    def setGroupDesc(self, description: str) -> None:  # noqa: N802
        self._group_description = description

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_description

    @property
    def communicators(self) -> Dict[str, "hal.Communicator"]:
        """The hal communicators made so far, by torch device ('cpu', 'cuda:0')."""
        with self._lock:
            return {_device_text(key): comm for key, comm in self._communicators.items()}

    @property
    def seconds_in_collectives(self) -> float:
        """Time this group's CPU operations have spent running, since it was made (GPU ones run on streams)."""
        return self._worker.busy_seconds

    def describe(self) -> str:
        lines = [f"process group '{BACKEND_NAME}' rank {self.rank()} of {self.size()}, timeout {self._timeout:g} s"]
        communicators = self.communicators
        for device, backend in self._delegates.items():
            lines.append(f"  {device}: torch's {backend.name()} (the backend string gives it {device} tensors)")
        if not communicators:
            lines.append("  no communicator yet: one is made per device type at its first collective")
        for device, comm in communicators.items():
            lines.append(f"  {device}: hal {comm.device.id}, {comm.description}")
        return "\n".join(lines)

    # -------------------------------------------------- plumbing

    def _communicator(self, tensor: torch.Tensor) -> "hal.Communicator":
        key = (tensor.device.type, tensor.device.index if tensor.device.index is not None else -1)
        with self._lock:
            if self._closed:
                raise hal.AbortedError("torch.distributed backend 'hal': the process group was aborted or shut down")
            comm = self._communicators.get(key)
        if comm is not None:
            return comm
        from . import _hal_device  # hal.torch's matching of torch devices to hal devices
        device = _hal_device(tensor.device)
        if device is None:
            raise _unsupported(f"no hal device is the same physical device as torch's {tensor.device} "
                               f"(hal has {[d.id for d in hal.runtime().devices]})")
        prefix = f"hal/{_device_text(key)}/"
        comm = hal.Communicator(device, self.rank(), self.size(), _store_adapter(self._store, prefix),
                                timeout=self._timeout, check=_fingerprint_check())
        with self._lock:
            self._communicators[key] = comm
        return comm

    def _timeout_of(self, opts) -> Optional[float]:
        timeout = getattr(opts, "timeout", None)
        seconds = timeout.total_seconds() if timeout is not None else -1.0
        return seconds if seconds > 0 else None  # torch's "unset" is negative: the group's timeout

    def _stream(self, comm: "hal.Communicator", tensor: torch.Tensor) -> Optional["hal.Stream"]:
        """None on CPU (hal's default stream, synchronized); torch's current stream on CUDA."""
        if tensor.device.type != "cuda":
            return None
        handle = torch.cuda.current_stream(tensor.device).cuda_stream
        key = (comm.device, handle)
        stream = self._cuda_streams.get(key)
        if stream is None:
            stream = self._cuda_streams[key] = comm.device.wrap_native_stream(handle, False)
        return stream

    def _submit(self, operation: str, tensors: Sequence[torch.Tensor], run: Callable[[Callable], None],
                result: List[torch.Tensor], opts=None) -> "dist.Work":
        """run(comm_for) does the operation; result is the Future's value. CPU: on the worker (or here when the
        caller waits at once and the worker is idle); CUDA: here, on torch's current stream, complete in stream
        order."""
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise _error(f"tensors on several devices {sorted(str(d) for d in devices)}; one collective runs on one")
        if tensors and tensors[0].device.type == "cuda":
            run(self._communicator)
            return _Work(operation, _completed(result))
        asynchronous = getattr(opts, "asyncOp", True)  # torch >= 2.15 says whether the caller waits at once
        return _Work(operation, self._worker.submit(lambda: (run(self._communicator), result)[1], asynchronous))

    # -------------------------------------------------- reductions

    def _all_reduce(self, comm, tensor: torch.Tensor, reduction: _Reduction, timeout, stream) -> None:
        if reduction.bitwise is not None:
            gathered = self._gather_all(comm, tensor.contiguous(), timeout, stream)
            tensor.copy_(functools.reduce(reduction.bitwise, gathered.unbind(0)))
            return
        dense = _Dense(tensor)
        view = _engine_view(dense.dense, "allreduce")
        _run(comm, "all_reduce", view, view, stream, timeout, op=reduction.engine_op)
        dense.finish()

    def _gather_all(self, comm, tensor: torch.Tensor, timeout, stream) -> torch.Tensor:
        out = torch.empty((self.size(),) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
        _run(comm, "all_gather", _engine_view(tensor, "allgather"), _engine_view(out, "allgather"), stream, timeout)
        return out

    @_delegable
    def allreduce(self, tensors: List[torch.Tensor], opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.AllreduceOptions()
        reductions = [_reduction("allreduce", opts.reduceOp, t.dtype) for t in tensors]
        for t in tensors:
            _check_dtype(t, "allreduce")
        timeout = self._timeout_of(opts)

        def run(comm_for):
            for tensor, reduction in zip(tensors, reductions):
                comm = comm_for(tensor)
                self._all_reduce(comm, tensor, reduction, timeout, self._stream(comm, tensor))
        return self._submit("allreduce", tensors, run, tensors, opts)

    @_delegable
    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts=None) -> "dist.Work":
        """One all_reduce per dtype over the tensors flattened together, copied back."""
        opts = opts if opts is not None else _c10d.AllreduceCoalescedOptions()
        reductions = {t.dtype: _reduction("allreduce_coalesced", opts.reduceOp, t.dtype) for t in tensors}
        for t in tensors:
            _check_dtype(t, "allreduce_coalesced")
        timeout = self._timeout_of(opts)

        def run(comm_for):
            for dtype, reduction in reductions.items():
                group = [t for t in tensors if t.dtype == dtype]
                comm = comm_for(group[0])
                flat = torch.cat([t.reshape(-1) for t in group])
                self._all_reduce(comm, flat, reduction, timeout, self._stream(comm, flat))
                for t, part in zip(group, flat.split([t.numel() for t in group])):
                    t.copy_(part.view_as(t))
        return self._submit("allreduce_coalesced", tensors, run, tensors, opts)

    @_delegable
    def reduce(self, tensors: List[torch.Tensor], opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.ReduceOptions()
        tensor = _single(tensors, "reduce")
        reduction = _reduction("reduce", opts.reduceOp, tensor.dtype)
        _check_dtype(tensor, "reduce")
        root, timeout = self._root(opts.rootRank, "reduce"), self._timeout_of(opts)

        def run(comm_for):
            comm = comm_for(tensor)
            stream = self._stream(comm, tensor)
            if reduction.bitwise is not None:
                result = tensor.clone()
                self._all_reduce(comm, result, reduction, timeout, stream)
                if self.rank() == root:
                    tensor.copy_(result)
                return
            dense = _Dense(tensor)
            view = _engine_view(dense.dense, "reduce")
            _run(comm, "reduce", view, view, stream, timeout, root=root, op=reduction.engine_op)
            dense.finish()
        return self._submit("reduce", tensors, run, tensors, opts)

    def _reduce_scatter(self, comm, output: torch.Tensor, flat_input: torch.Tensor, reduction: _Reduction,
                        timeout, stream) -> None:
        if output.numel() * self.size() != flat_input.numel():
            raise _error(f"reduce_scatter: the input has {flat_input.numel()} elements, not world size "
                         f"{self.size()} times the output's {output.numel()}")
        if reduction.bitwise is not None:
            reduced = flat_input.clone()
            self._all_reduce(comm, reduced, reduction, timeout, stream)
            output.copy_(reduced.view(self.size(), -1)[self.rank()].view_as(output))
            return
        dense = _Dense(output, read=False)
        _run(comm, "reduce_scatter", _engine_view(flat_input, "reduce_scatter"),
             _engine_view(dense.dense, "reduce_scatter"), stream, timeout, op=reduction.engine_op)
        dense.finish()

    @_delegable
    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts=None) -> "dist.Work":
        return self._reduce_scatter_pairs([output], [input], opts, "reduce_scatter_tensor")

    @_delegable
    def reduce_scatter_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts=None) -> "dist.Work":
        return self._reduce_scatter_pairs(outputs, inputs, opts, "reduce_scatter_tensor_coalesced")

    def _reduce_scatter_pairs(self, outputs, inputs, opts, operation: str) -> "dist.Work":
        """Each input (world size times its output's elements) reduce-scattered into its output, in order."""
        opts = opts if opts is not None else _c10d.ReduceScatterOptions()
        for output, input in zip(outputs, inputs):
            _same_dtype(output, input, operation)
            _check_dtype(input, operation)
        reductions = [_reduction(operation, opts.reduceOp, t.dtype) for t in inputs]
        timeout = self._timeout_of(opts)

        def run(comm_for):
            for output, input, reduction in zip(outputs, inputs, reductions):
                comm = comm_for(input)
                self._reduce_scatter(comm, output, input.contiguous(), reduction, timeout, self._stream(comm, input))
        return self._submit(operation, list(outputs) + list(inputs), run, list(outputs), opts)

    @_delegable
    def reduce_scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]],
                       opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.ReduceScatterOptions()
        output = _single(output_tensors, "reduce_scatter")
        inputs = self._per_rank_list(input_tensors, output, "reduce_scatter", "input")
        reduction = _reduction("reduce_scatter", opts.reduceOp, output.dtype)
        _check_dtype(output, "reduce_scatter")
        timeout = self._timeout_of(opts)

        def run(comm_for):
            comm = comm_for(output)
            flat = torch.cat([t.reshape(-1) for t in inputs])
            self._reduce_scatter(comm, output, flat, reduction, timeout, self._stream(comm, output))
        return self._submit("reduce_scatter", [output] + list(inputs), run, output_tensors, opts)

    # -------------------------------------------------- data movement

    @_delegable
    def broadcast(self, tensors: List[torch.Tensor], opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.BroadcastOptions()
        root, timeout = self._root(opts.rootRank, "broadcast"), self._timeout_of(opts)
        if opts.rootTensor != 0:
            raise _error(f"broadcast: rootTensor is {opts.rootTensor}; one tensor per process, so it must be 0")
        for t in tensors:
            _check_dtype(t, "broadcast")

        def run(comm_for):
            for tensor in tensors:
                comm = comm_for(tensor)
                dense = _Dense(tensor)
                view = _engine_view(dense.dense, "broadcast")
                _run(comm, "broadcast", view, view, self._stream(comm, tensor), timeout, root=root)
                dense.finish()
        return self._submit("broadcast", tensors, run, tensors, opts)

    def _all_gather_into(self, comm, output: torch.Tensor, input: torch.Tensor, timeout, stream) -> None:
        if output.numel() != input.numel() * self.size():
            raise _error(f"all_gather_into_tensor: the output has {output.numel()} elements, not world size "
                         f"{self.size()} times the input's {input.numel()}")
        dense = _Dense(output, read=False)
        _run(comm, "all_gather", _engine_view(input.contiguous(), "allgather"), _engine_view(dense.dense, "allgather"),
             stream, timeout)
        dense.finish()

    @_delegable
    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts=None) -> "dist.Work":
        return self._all_gather_pairs([output], [input], opts, "all_gather_into_tensor")

    @_delegable
    def allgather_into_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts=None) -> "dist.Work":
        return self._all_gather_pairs(outputs, inputs, opts, "allgather_into_tensor_coalesced")

    def _all_gather_pairs(self, outputs, inputs, opts, operation: str) -> "dist.Work":
        """Each input gathered from every rank into its output (world size times its elements), in order."""
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        for output, input in zip(outputs, inputs):
            _same_dtype(output, input, operation)
            _check_dtype(input, operation)
        timeout = self._timeout_of(opts)

        def run(comm_for):
            for output, input in zip(outputs, inputs):
                comm = comm_for(input)
                self._all_gather_into(comm, output, input, timeout, self._stream(comm, input))
        return self._submit(operation, list(outputs) + list(inputs), run, list(outputs), opts)

    @_delegable
    def allgather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
                  opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        input = _single(input_tensors, "allgather")
        outputs = self._per_rank_list(output_tensors, input, "allgather", "output")  # equal sizes, as gloo's
        _check_dtype(input, "allgather")
        timeout = self._timeout_of(opts)

        def run(comm_for):
            comm = comm_for(input)
            gathered = self._gather_all(comm, input.contiguous(), timeout, self._stream(comm, input))
            for t, part in zip(outputs, gathered.unbind(0)):
                t.copy_(part.view_as(t))
        return self._submit("allgather", [input] + list(outputs), run, outputs, opts)

    @_delegable
    def allgather_coalesced(self, output_lists: List[List[torch.Tensor]], input_list: List[torch.Tensor],
                            opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        works = []
        for i, input in enumerate(input_list):
            works.append([[output_lists[r][i] for r in range(self.size())], [input]])
        for outputs, inputs in works:
            for t in outputs:
                _same_dtype(t, inputs[0], "allgather_coalesced")
            _check_dtype(inputs[0], "allgather_coalesced")
        timeout = self._timeout_of(opts)

        def run(comm_for):
            for outputs, inputs in works:
                comm = comm_for(inputs[0])
                gathered = self._gather_all(comm, inputs[0].contiguous(), timeout, self._stream(comm, inputs[0]))
                for t, part in zip(outputs, gathered.unbind(0)):
                    t.copy_(part.view_as(t))
        return self._submit("allgather_coalesced", list(input_list), run, [t for row in output_lists for t in row], opts)

    @_delegable
    def gather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
               opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.GatherOptions()
        input = _single(input_tensors, "gather")
        root, timeout = self._root(opts.rootRank, "gather"), self._timeout_of(opts)
        outputs = self._root_list(output_tensors, input, root, "gather", "output")
        _check_dtype(input, "gather")

        def run(comm_for):
            comm = comm_for(input)
            out = torch.empty((self.size(),) + tuple(input.shape), dtype=input.dtype, device=input.device) \
                if outputs else None
            self._gather(comm, input, out, root, timeout)
            for t, part in zip(outputs, out.unbind(0) if outputs else ()):
                t.copy_(part.view_as(t))
        return self._submit("gather", [input] + list(outputs), run, output_tensors[0] if output_tensors else [], opts)

    def _gather(self, comm, input: torch.Tensor, out: Optional[torch.Tensor], root: int, timeout) -> None:
        """input from every rank into out (contiguous, world size times input's elements) on the root; out is None
        elsewhere."""
        send = _engine_view(input.contiguous(), "gather")
        _run(comm, "gather", send, _engine_view(out, "gather") if out is not None else send,
             self._stream(comm, input), timeout, root=root)

    @_delegable
    def gather_single(self, output: torch.Tensor, input: torch.Tensor, opts=None) -> "dist.Work":
        """gather into one tensor of world size times the input's elements on the root (empty elsewhere)."""
        opts = opts if opts is not None else _c10d.GatherOptions()
        root, timeout = self._root(opts.rootRank, "gather"), self._timeout_of(opts)
        _check_dtype(input, "gather")
        if self.rank() == root:
            _same_dtype(output, input, "gather")
            if output.numel() != input.numel() * self.size():
                raise _error(f"gather: the output has {output.numel()} elements, not world size {self.size()} "
                             f"times the input's {input.numel()}")

        def run(comm_for):
            dense = _Dense(output, read=False) if self.rank() == root else None
            self._gather(comm_for(input), input, dense.dense if dense else None, root, timeout)
            if dense:
                dense.finish()
        return self._submit("gather", [output, input], run, [output], opts)

    @_delegable
    def scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]],
                opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.ScatterOptions()
        output = _single(output_tensors, "scatter")
        root, timeout = self._root(opts.rootRank, "scatter"), self._timeout_of(opts)
        inputs = self._root_list(input_tensors, output, root, "scatter", "input")
        _check_dtype(output, "scatter")

        def run(comm_for):
            comm = comm_for(output)
            dense = _Dense(output, read=False)
            recv = _engine_view(dense.dense, "scatter")
            send = _engine_view(torch.cat([t.reshape(-1) for t in inputs]), "scatter") if inputs else recv
            _run(comm, "scatter", send, recv, self._stream(comm, output), timeout, root=root)
            dense.finish()
        return self._submit("scatter", [output] + list(inputs), run, output_tensors, opts)

    @_delegable
    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: List[int],
                      input_split_sizes: List[int], opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.AllToAllOptions()
        _same_dtype(output, input, "all_to_all_single")
        _check_dtype(input, "all_to_all_single")
        timeout = self._timeout_of(opts)
        world = self.size()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % world or output.numel() != input.numel():
                raise _error(f"all_to_all_single: input of {input.numel()} and output of {output.numel()} elements "
                             f"do not split into {world} equal blocks")

            def run(comm_for):
                comm = comm_for(input)
                dense = _Dense(output, read=False)
                _run(comm, "all_to_all", _engine_view(input.contiguous(), "all_to_all"),
                     _engine_view(dense.dense, "all_to_all"), self._stream(comm, input), timeout)
                dense.finish()
            return self._submit("all_to_all_single", [output, input], run, [output], opts)
        sends = _split_rows(input, input_split_sizes, world, "input")
        receives = _split_rows(output, output_split_sizes, world, "output")

        def run_unequal(comm_for):
            self._exchange(comm_for(input), sends, receives, timeout)
        return self._submit("all_to_all_single", [output, input], run_unequal, [output], opts)

    @_delegable
    def alltoall(self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor],
                 opts=None) -> "dist.Work":
        opts = opts if opts is not None else _c10d.AllToAllOptions()
        self._check_world_list(output_tensors, "all_to_all", "output")
        self._check_world_list(input_tensors, "all_to_all", "input")
        for t in list(output_tensors) + list(input_tensors):
            _same_dtype(t, input_tensors[0], "all_to_all")
        _check_dtype(input_tensors[0], "all_to_all")
        timeout = self._timeout_of(opts)

        def run(comm_for):
            self._exchange(comm_for(input_tensors[0]), list(input_tensors), list(output_tensors), timeout)
        return self._submit("alltoall", list(output_tensors) + list(input_tensors), run, output_tensors, opts)

    def _exchange(self, comm, sends: List[torch.Tensor], receives: List[torch.Tensor], timeout) -> None:
        """Rank r's sends[j] arrives in rank j's receives[r]: point to point in one group, own block copied."""
        rank = self.rank()
        if sends[rank].numel() != receives[rank].numel():
            raise _error(f"all_to_all: rank {rank} sends itself {sends[rank].numel()} elements but expects "
                         f"{receives[rank].numel()}")
        receives[rank].copy_(sends[rank])
        stream = self._stream(comm, sends[rank])
        chosen = stream if stream is not None else hal.default_stream(comm.device)
        dense_receives = [_Dense(t, read=False) for t in receives]
        kept = []  # the hal tensors stay alive until the group has run
        comm._native.group_start()
        try:
            for peer in range(self.size()):
                if peer == rank:
                    continue
                if sends[peer].numel():
                    kept.append(hal.from_dlpack(_engine_view(sends[peer].contiguous(), "all_to_all")))
                    comm._native.run_point_to_point("send", kept[-1], peer, chosen, False, timeout)
                if receives[peer].numel():
                    kept.append(hal.from_dlpack(_engine_view(dense_receives[peer].dense, "all_to_all")))
                    comm._native.run_point_to_point("recv", kept[-1], peer, chosen, False, timeout)
        except BaseException:
            comm._native.group_cancel()
            raise
        comm._native.group_end()
        if stream is None:
            chosen.synchronize()
        for peer, dense in enumerate(dense_receives):
            if peer != rank:
                dense.finish()

    # torch 2.15 calls the single-tensor forms by these names; earlier releases by the ones above.
    all_gather_single = _allgather_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single = _reduce_scatter_base
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced
    all_to_all_single = alltoall_base

    # -------------------------------------------------- point to point and barrier

    @_delegable
    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> "dist.Work":
        tensor = _single(tensors, "send")
        _check_dtype(tensor, "send")
        peer = self._peer(dst, "send")

        def run(comm_for):
            comm = comm_for(tensor)
            comm.send(_engine_view(tensor.contiguous(), "send"), peer, stream=self._stream(comm, tensor))
        return self._submit("send", tensors, run, tensors)

    @_delegable
    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> "dist.Work":
        tensor = _single(tensors, "recv")
        _check_dtype(tensor, "recv")
        peer = self._peer(src, "recv")

        def run(comm_for):
            comm = comm_for(tensor)
            dense = _Dense(tensor, read=False)
            comm.recv(_engine_view(dense.dense, "recv"), peer, stream=self._stream(comm, tensor))
            dense.finish()
        return self._submit("recv", tensors, run, tensors)

    @_delegable
    def recv_anysource(self, tensors: List[torch.Tensor], tag: int = 0) -> "dist.Work":
        raise _unsupported("recv from any source: hal's engines receive from a named rank; pass src=")

    def barrier(self, opts=None) -> "dist.Work":
        timeout = self._timeout_of(opts) if opts is not None else None
        probe = torch.empty(1)  # a barrier runs on the CPU communicator

        def run(comm_for):
            comm = comm_for(probe)
            if timeout is None:
                comm.barrier()
            else:  # hal's barrier takes the communicator's timeout; a timed barrier is an all_reduce of one byte
                comm.all_reduce(torch.zeros(1, dtype=torch.uint8), "max", timeout=timeout)
        return self._submit("barrier", [probe], run, [], opts)

    # -------------------------------------------------- life cycle

    def abort(self) -> None:
        """Operations in flight and later ones fail (hal.AbortedError); from any thread."""
        with self._lock:
            self._closed = True
            communicators = list(self._communicators.values())
        for comm in communicators:
            comm.abort()

    def shutdown(self) -> None:
        """Aborts what still runs, releases the communicators and stops the worker."""
        self.abort()
        with self._lock:
            communicators, self._communicators = list(self._communicators.values()), {}
            self._cuda_streams = {}
        for comm in communicators:
            comm.destroy()
        self._worker.stop()

    # -------------------------------------------------- argument checks

    def _root(self, root: int, operation: str) -> int:
        if not 0 <= root < self.size():
            raise _error(f"{operation}: root rank {root} is not in this group of {self.size()} ranks")
        return root

    def _peer(self, peer: int, operation: str) -> int:
        if not 0 <= peer < self.size() or peer == self.rank():
            raise _error(f"{operation}: peer rank {peer} must be another rank of this group of {self.size()} "
                         f"(this one is {self.rank()})")
        return peer

    def _root_list(self, lists: Sequence[List[torch.Tensor]], like: torch.Tensor, root: int, operation: str,
                   role: str) -> List[torch.Tensor]:
        """The root's list of one tensor per rank (gather's outputs, scatter's inputs); [] on the other ranks, whose
        lists do not matter."""
        return self._per_rank_list(lists, like, operation, role) if self.rank() == root else []

    def _per_rank_list(self, lists: Sequence[List[torch.Tensor]], like: torch.Tensor, operation: str,
                       role: str) -> List[torch.Tensor]:
        """The one list of one tensor per rank, each of like's dtype and size."""
        tensors = _single(lists, operation)
        self._check_world_list(tensors, operation, role)
        for t in tensors:
            _same_dtype(t, like, operation)
            if t.numel() != like.numel():
                raise _error(f"{operation}: {role} tensors have {t.numel()} elements, {like.numel()} expected")
        return tensors

    def _check_world_list(self, tensors: Sequence[torch.Tensor], operation: str, role: str) -> None:
        if len(tensors) != self.size():
            raise _error(f"{operation}: {len(tensors)} {role} tensors; one per rank ({self.size()}) is needed")


def _single(items: Sequence, operation: str):
    if len(items) != 1:
        raise _error(f"{operation}: {len(items)} tensors (or lists) given; one per process is supported")
    return items[0]


def _same_dtype(a: torch.Tensor, b: torch.Tensor, operation: str) -> None:
    if a.dtype != b.dtype:
        raise _error(f"{operation}: tensors of {a.dtype} and {b.dtype}; all must have one dtype")


def _split_rows(tensor: torch.Tensor, sizes: List[int], world: int, role: str) -> List[torch.Tensor]:
    """The tensor's dim-0 blocks, one per rank: equal when sizes is empty."""
    rows = tensor.shape[0] if tensor.dim() else 1
    if not sizes:
        if rows % world:
            raise _error(f"all_to_all_single: the {role}'s {rows} rows do not split into {world} equal blocks")
        sizes = [rows // world] * world
    if len(sizes) != world or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise _error(f"all_to_all_single: {role} split sizes {list(sizes)} must be {world} non-negative counts "
                      f"adding up to the {role}'s {rows} rows")
    return list(tensor.split(list(sizes)))


def _run(comm: "hal.Communicator", operation: str, send: torch.Tensor, recv: torch.Tensor, stream, timeout,
         root: int = 0, op: str = "sum") -> None:
    """One hal collective on contiguous engine views, passed by address (no DLPack exchange per call). stream None:
    hal's default stream of the device, waited for."""
    if send.numel() == 0 and recv.numel() == 0:
        return  # nothing to move on any rank: the sizes agree across ranks
    chosen = stream if stream is not None else hal.default_stream(comm.device)
    device = (2, send.device.index) if send.device.type == "cuda" else (1, 0)  # DLPack's kDLCUDA, kDLCPU
    comm._native.run_borrowed(hal.runtime(), operation, device, _DTYPES[send.dtype],
                              (send.data_ptr(), [send.numel()], [1]), (recv.data_ptr(), [recv.numel()], [1]), root, op,
                              chosen, stream is None, timeout)


def _fingerprint_check() -> Optional[bool]:
    """True under TORCH_DISTRIBUTED_DEBUG=DETAIL, torch's switch for checking that ranks call the same collectives
    (hal's fingerprint check: a store round trip per operation); else hal's collectives.check setting decides."""
    return True if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL" else None


def _device_text(key: Tuple[str, int]) -> str:
    return key[0] if key[1] < 0 else f"{key[0]}:{key[1]}"


class _Work(dist.Work):
    """An operation's handle: wait(timeout), is_completed(), exception(), get_future() (DDP's hooks chain on it).

    The Future's value is the output tensors (a list), as torch's backends give it."""

    def __init__(self, operation: str, future: torch.futures.Future):
        super().__init__()
        self._operation = operation
        self._future = future

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        seconds = timeout.total_seconds() if timeout is not None else 0.0
        if seconds > 0 and not self._future.done() and not self._done_within(seconds):
            raise hal.TimeoutError(f"torch.distributed backend 'hal': {self._operation} did not complete within "
                                   f"{seconds:g} s (wait's timeout; the operation keeps its own)")
        self._future.wait()  # raises the operation's error
        return True

    def _done_within(self, seconds: float) -> bool:
        done = threading.Event()  # made here, not per operation: most operations are done before anyone waits
        self._future.add_done_callback(lambda _: done.set())
        return done.wait(seconds)

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        return self._future.done() and self.exception() is None

    def exception(self) -> Optional[BaseException]:
        if not self._future.done():
            return None
        try:
            self._future.value()
        except BaseException as error:  # noqa: BLE001 (the operation's error is the answer)
            return error
        return None

    def synchronize(self) -> None:
        self.wait()


# ------------------------------------------------------------------ registration and inspection

def _create(options, backend_options=None) -> ProcessGroupHal:
    """torch's extended creator API: besides the store and ranks, the process group being built, which holds the
    backends made before hal's for a mixed string ("cpu:gloo,cuda:hal"): hal's group replaces it (torch keeps a
    Python process group whole), so it hands those devices' tensors to them."""
    delegates = {}
    parent = getattr(options, "process_group", None)
    for device in ("cpu", "cuda"):
        try:
            backend = parent._get_backend(torch.device(device)) if parent is not None else None
        except RuntimeError:
            continue  # no backend for that device yet
        if backend is not None and backend.name() != BACKEND_NAME:
            delegates[device] = backend
    return ProcessGroupHal(options.store, options.group_rank, options.group_size, options.timeout, delegates)


# (rank, world size, local rank, local world size) variables of the launchers that do not set torchrun's.
_LAUNCHER_VARIABLES = (
    ("mpirun", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE")),
    ("srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")),
)


def _export_launcher_ranks(environment=os.environ) -> Optional[str]:
    """Under mpirun or srun, which set no RANK/WORLD_SIZE, sets torchrun's variables from the launcher's so that
    init_process_group's env:// works (MASTER_ADDR/MASTER_PORT still come from the user). Returns the launcher."""
    if "RANK" in environment or "WORLD_SIZE" in environment:
        return None
    for launcher, names in _LAUNCHER_VARIABLES:
        if names[0] in environment and names[1] in environment:
            for torch_name, name in zip(("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"), names):
                if name in environment:
                    environment.setdefault(torch_name, environment[name].split("(")[0])
            return launcher
    return None


def register() -> None:
    """Registers the backend "hal" with torch.distributed for cpu and cuda (import hal.torch does this once), and
    under mpirun or srun sets RANK/WORLD_SIZE/LOCAL_RANK from the launcher when they are not set."""
    _export_launcher_ranks()
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def describe(group=None) -> str:
    """Which hal engine serves which device of a process group (default: the world group), and why."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupHal):
        raise _error(f"describe: the group runs on backend '{dist.get_backend(pg)}', not '{BACKEND_NAME}'")
    return pg.describe()


@atexit.register
def _shutdown_live_groups() -> None:
    """Communicators hold threads and sockets: release them before the interpreter goes."""
    for pg in list(_live_groups):
        try:
            pg.shutdown()
        except Exception:  # noqa: BLE001 (exiting: nothing left to tell)
            pass
    gc.collect()  # an operation's error keeps its frames, and with them the communicator, in a reference cycle
