"""hal.Communicator: collectives across processes on any DLPack tensors (numpy, torch, hal.Tensor).

The C++ hal::Communicator underneath (docs/collectives.md): Gloo or MPI on the
host backend, NCCL/RCCL/the PPU's collectives on GPUs. Every operation takes
tensors in place of (buffer, count, dtype): counts and the dtype come from the
tensors, which must be contiguous and on the communicator's device.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _hal
from ._errors import InvalidArgumentError

_OPS = ("sum", "prod", "min", "max", "avg")


def _pick_device(rt, local_rank: int):
    """The device a rank uses when none is given: its local_rank-th device of the first accelerator backend
    with devices (one rank per device, as NCCL requires), else host:0."""
    accelerators = [d for d in rt.devices if d.backend != "host"]
    if accelerators:
        backend = accelerators[0].backend
        same = [d for d in accelerators if d.backend == backend]
        if local_rank >= len(same):
            raise InvalidArgumentError(
                f"Communicator.from_environment: local rank {local_rank} has no device of its own ({backend} has "
                f"{len(same)}); start at most {len(same)} ranks per host or pass device=")
        return same[local_rank]
    return rt.device("host:0")


class Communicator:
    """A group of ranks that run collectives together; every rank makes the same calls in the same order.

    Make one with ``Communicator.from_environment()`` under torchrun, halrun,
    mpirun or srun, or ``Communicator(device, rank, world_size, store)``.
    Operations with ``stream=None`` run on hal's default stream of the device
    and return when done; with a stream they are only enqueued on it.
    """

    def __init__(self, device, rank: int, world_size: int, store, *, timeout: float = 300.0,
                 engine: str = "", check: Optional[bool] = None, _native=None):
        self._native = _native if _native is not None else _hal._Communicator.create(
            device, int(rank), int(world_size), store, float(timeout), engine, check)
        self.source = ""  # what from_environment read, e.g. "RANK/WORLD_SIZE, TcpStore 10.0.0.1:29500"
        self.local_rank = 0

    @classmethod
    def from_environment(cls, device=None, *, timeout: float = 300.0, connect_timeout: float = 60.0,
                         engine: str = "", check: Optional[bool] = None, runtime=None) -> "Communicator":
        """A communicator over every rank of the job, from the launcher's variables (torchrun's RANK/WORLD_SIZE,
        mpirun's OMPI_COMM_WORLD_*, srun's SLURM_*; the store from MASTER_ADDR/MASTER_PORT or HAL_STORE_DIR).

        device: a hal.Device; default the rank's own accelerator (LOCAL_RANK-th device) when hal has one, else
        host:0. engine: the host backend's 'auto', 'gloo', 'mpi' or 'shm' (default HAL_COLL_ENGINE, then auto).
        """
        from . import runtime as default_runtime
        rt = runtime if runtime is not None else default_runtime()
        launch = _hal._launch_environment(float(connect_timeout))
        if device is None:
            device = _pick_device(rt, launch.local_rank)
        communicator = cls(device, launch.rank, launch.world_size, launch.store, timeout=timeout, engine=engine,
                           check=check)
        communicator.source = launch.source
        communicator.local_rank = launch.local_rank
        return communicator

    @property
    def rank(self) -> int:
        return self._native.rank

    @property
    def world_size(self) -> int:
        return self._native.world_size

    @property
    def device(self):
        return self._native.device

    @property
    def description(self) -> str:
        """Which engine runs this communicator and why."""
        return self._native.description

    def __repr__(self) -> str:
        return f"<hal.Communicator rank {self.rank} of {self.world_size} on {self.device.id}>"

    # ------------------------------------------------------------ helpers

    def _tensor(self, obj: Any, name: str):
        from . import from_dlpack
        if obj is None:
            raise InvalidArgumentError(f"{name} is None")
        return from_dlpack(obj)

    def _stream(self, stream):
        from . import default_stream
        return (stream if stream is not None else default_stream(self.device)), stream is None

    def _run(self, operation: str, send: Any, recv: Any, *, root: int = 0, op: str = "sum", stream=None,
             timeout: Optional[float] = None):
        if op not in _OPS:
            raise InvalidArgumentError(f"{operation}: op '{op}' is not one of {', '.join(_OPS)}")
        chosen, synchronize = self._stream(stream)
        self._native.run(operation, self._tensor(send, "send"), self._tensor(recv, "recv"), int(root), op, chosen,
                         synchronize, timeout)

    def _output(self, like, shape, given):
        from . import empty
        if given is not None:
            return given
        return empty(shape, self._tensor(like, "send").dtype, self.device)

    # ------------------------------------------------------------ collectives

    def all_reduce(self, tensor: Any, op: str = "sum", *, out: Any = None, stream=None,
                   timeout: Optional[float] = None):
        """Reduces tensor over all ranks with op ('sum', 'prod', 'min', 'max', 'avg'); in place unless out is given.
        Returns the result (tensor or out)."""
        target = tensor if out is None else out
        self._run("all_reduce", tensor, target, op=op, stream=stream, timeout=timeout)
        return target

    def broadcast(self, tensor: Any, root: int = 0, *, out: Any = None, stream=None, timeout: Optional[float] = None):
        """Every rank gets the root's tensor; in place unless out is given."""
        target = tensor if out is None else out
        self._run("broadcast", tensor, target, root=root, stream=stream, timeout=timeout)
        return target

    def reduce(self, tensor: Any, root: int = 0, op: str = "sum", *, out: Any = None, stream=None,
               timeout: Optional[float] = None):
        """The reduction arrives on the root only (in tensor, or out); other ranks' tensors are left as they are."""
        target = tensor if out is None else out
        self._run("reduce", tensor, target, root=root, op=op, stream=stream, timeout=timeout)
        return target

    def all_gather(self, tensor: Any, out: Any = None, *, stream=None, timeout: Optional[float] = None):
        """out (world_size times tensor's elements; default a new hal.Tensor of shape (world_size, *tensor.shape))
        gets every rank's tensor in rank order. Returns out."""
        send = self._tensor(tensor, "tensor")
        out = self._output(send, (self.world_size,) + tuple(send.shape), out)
        self._run("all_gather", send, out, stream=stream, timeout=timeout)
        return out

    def reduce_scatter(self, tensor: Any, out: Any = None, op: str = "sum", *, stream=None,
                       timeout: Optional[float] = None):
        """tensor holds world_size blocks; rank r gets block r reduced over all ranks in out (default a new
        hal.Tensor of tensor.shape[1:] when tensor.shape[0] is world_size, else of 1-D). Returns out."""
        send = self._tensor(tensor, "tensor")
        if out is None:
            if send.size % self.world_size:
                raise InvalidArgumentError(
                    f"reduce_scatter: tensor's {send.size} elements do not split into {self.world_size} blocks")
            shape = tuple(send.shape[1:]) if send.ndim and send.shape[0] == self.world_size else \
                (send.size // self.world_size,)
            out = self._output(send, shape, None)
        self._run("reduce_scatter", send, out, op=op, stream=stream, timeout=timeout)
        return out

    def all_to_all(self, tensor: Any, out: Any = None, *, stream=None, timeout: Optional[float] = None):
        """Block j of tensor (world_size equal blocks) goes to rank j; out's block i comes from rank i. Returns out
        (default a new hal.Tensor shaped like tensor)."""
        send = self._tensor(tensor, "tensor")
        out = self._output(send, tuple(send.shape), out)
        self._run("all_to_all", send, out, stream=stream, timeout=timeout)
        return out

    def gather(self, tensor: Any, out: Any = None, root: int = 0, *, stream=None, timeout: Optional[float] = None):
        """The root's out (world_size times tensor's elements) gets every rank's tensor; out matters on the root only."""
        send = self._tensor(tensor, "tensor")
        if out is None:
            out = self._output(send, (self.world_size,) + tuple(send.shape), None) if self.rank == root else send
        self._run("gather", send, out, root=root, stream=stream, timeout=timeout)
        return out

    def scatter(self, tensor: Any, out: Any, root: int = 0, *, stream=None, timeout: Optional[float] = None):
        """Block r of the root's tensor (world_size blocks) arrives in rank r's out; tensor matters on the root only."""
        self._run("scatter", tensor, out, root=root, stream=stream, timeout=timeout)
        return out

    def send(self, tensor: Any, peer: int, *, stream=None, timeout: Optional[float] = None) -> None:
        """Sends tensor to peer, whose recv must match it in size and dtype."""
        chosen, synchronize = self._stream(stream)
        self._native.run_point_to_point("send", self._tensor(tensor, "tensor"), int(peer), chosen, synchronize, timeout)

    def recv(self, tensor: Any, peer: int, *, stream=None, timeout: Optional[float] = None):
        """Receives into tensor from peer. Returns tensor."""
        chosen, synchronize = self._stream(stream)
        self._native.run_point_to_point("recv", self._tensor(tensor, "tensor"), int(peer), chosen, synchronize, timeout)
        return tensor

    def barrier(self, *, stream=None) -> None:
        """Returns when every rank has reached it (with a stream: enqueues it)."""
        chosen, synchronize = self._stream(stream)
        self._native.barrier(chosen, synchronize)

    def split(self, color: int, key: int = 0) -> Optional["Communicator"]:
        """Ranks with the same color form a new communicator ordered by key, then rank; a negative color takes no
        part and gets None."""
        native = self._native.split(int(color), int(key))
        if not native.valid:
            return None
        return Communicator(None, 0, 0, None, _native=native)

    def abort(self) -> None:
        """From any thread: operations in flight and later ones fail with hal.AbortedError."""
        self._native.abort()

    def destroy(self) -> None:
        """Aborts what still runs and releases the communicator; it cannot be used afterwards."""
        self._native.destroy()
