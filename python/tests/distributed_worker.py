"""One rank of the torch.distributed backend tests (test_torch_distributed.py starts several, or a launcher does).

Each mode checks hal's backend against torch's own gloo backend in the same process: the default group runs on
"hal", a second group over the same ranks on "gloo", and every call is made on both with the same inputs. Prints
"rank R: ok" at the end; a failed check raises and exits non-zero.

modes: ops (every op x dtype x reduce op), ddp (Llama-style model, 10 steps), fsdp (fully_shard, 5 steps),
mismatch (ranks disagree on a size), kill (rank 1 dies inside a collective), launch (a short check, any launcher),
mixed ("cpu:gloo,cuda:hal": CPU tensors go to torch's gloo).
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import hal
import hal.torch  # noqa: F401  (registers the backend "hal")
from hal.torch import distributed as hal_dist

mode = sys.argv[1]
timeout = float(os.environ.get("HAL_TEST_TIMEOUT", "60"))
# mixed: CPU tensors to torch's gloo, CUDA tensors to hal (the backend string's order: hal last)
dist.init_process_group("cpu:gloo,cuda:hal" if mode == "mixed" else "hal", timeout=datetime.timedelta(seconds=timeout))
rank, world = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")


def check(condition, what):
    if not condition:
        raise AssertionError(f"rank {rank}: {what}")


def tolerance(dtype):
    return {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-6, torch.float64: 1e-12}.get(dtype, 0)


def same(a, b, what):
    if isinstance(a, (list, tuple)):
        check(len(a) == len(b), f"{what}: {len(a)} results against gloo's {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]")
        return
    check(a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} against gloo's "
                                                     f"{b.dtype}{tuple(b.shape)}")
    if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
        check(torch.equal(a, b), f"{what}: {a.tolist()} against gloo's {b.tolist()}")
    else:
        tol = tolerance(a.dtype)
        check(torch.allclose(a, b, rtol=tol, atol=tol), f"{what}: max difference {(a - b).abs().max().item()} "
                                                         f"against gloo (tolerance {tol})")


def values(shape, dtype, salt):
    """Rank-dependent values every dtype holds exactly (small integers; 0/1 for bool)."""
    generator = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 4, shape, generator=generator).to(dtype)
    return torch.randint(-4, 5, shape, generator=generator).to(dtype)


def both(call, make):
    """call(group, *tensors) on hal's default group and on gloo with equal fresh tensors; returns both sets."""
    results = []
    for group in (None, gloo):
        tensors = make()
        call(group, *tensors)
        results.append(tensors)
    return results


def run_ops():
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
              torch.int64, torch.bool]
    float_ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    int_ops = float_ops + [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
    cases = 0
    for d, dtype in enumerate(dtypes):
        ops = float_ops if dtype.is_floating_point else int_ops
        for o, op in enumerate(ops):
            salt = 100 * d + o
            hal_t, gloo_t = both(lambda g, t: dist.all_reduce(t, op, group=g), lambda: [values((5, 3), dtype, salt)])
            same(hal_t, gloo_t, f"all_reduce {op} {dtype}")
            hal_t, gloo_t = both(lambda g, t: dist.reduce(t, 1 % world, op, group=g),
                                 lambda: [values((7,), dtype, salt)])
            if rank == 1 % world:  # elsewhere gloo leaves partial results; hal leaves the input as it was
                same(hal_t, gloo_t, f"reduce {op} {dtype}")
            else:
                same(hal_t, [values((7,), dtype, salt)], f"reduce {op} {dtype} off the root")
            if dtype != torch.bool:  # torch's gloo has no reduce_scatter for bool
                hal_t, gloo_t = both(lambda g, o, i: dist.reduce_scatter_tensor(o, i, op, group=g),
                                     lambda: [torch.zeros(4, dtype=dtype), values((world * 4,), dtype, salt)])
                same(hal_t[0], gloo_t[0], f"reduce_scatter_tensor {op} {dtype}")
            cases += 3
        if dtype.is_floating_point:  # AVG: gloo has none, so against SUM / world on gloo
            mine = values((6,), dtype, 7 + d)
            dist.all_reduce(mine, dist.ReduceOp.AVG)
            total = values((6,), dtype, 7 + d)
            dist.all_reduce(total, group=gloo)
            same(mine, total / world, f"all_reduce AVG {dtype}")
        hal_t, gloo_t = both(lambda g, t: dist.broadcast(t, world - 1, group=g), lambda: [values((9,), dtype, d)])
        same(hal_t, gloo_t, f"broadcast {dtype}")
        hal_t, gloo_t = both(lambda g, o, i: dist.all_gather_into_tensor(o, i, group=g),
                             lambda: [torch.zeros(world * 3, dtype=dtype), values((3,), dtype, d)])
        same(hal_t[0], gloo_t[0], f"all_gather_into_tensor {dtype}")
        hal_t, gloo_t = both(lambda g, i, *o: dist.all_gather(list(o), i, group=g),
                             lambda: [values((2, 2), dtype, d)] + [torch.zeros(2, 2, dtype=dtype) for _ in range(world)])
        same(hal_t[1:], gloo_t[1:], f"all_gather {dtype}")
        hal_t, gloo_t = both(lambda g, o, i: dist.all_to_all_single(o, i, group=g),
                             lambda: [torch.zeros(world * 2, dtype=dtype), values((world * 2,), dtype, d)])
        same(hal_t[0], gloo_t[0], f"all_to_all_single {dtype}")
        cases += 4
    # Unequal all_to_all_single: rank r sends r + j + 1 rows to rank j.
    send_rows = [rank + j + 1 for j in range(world)]
    receive_rows = [j + rank + 1 for j in range(world)]
    hal_t, gloo_t = both(lambda g, o, i: dist.all_to_all_single(o, i, receive_rows, send_rows, group=g),
                         lambda: [torch.zeros(sum(receive_rows), 2), values((sum(send_rows), 2), torch.float32, 1)])
    same(hal_t[0], gloo_t[0], "all_to_all_single with unequal splits")
    hal_t, gloo_t = both(lambda g, *t: dist.all_to_all(list(t[:world]), list(t[world:]), group=g),
                         lambda: [torch.zeros(3, dtype=torch.int64) for _ in range(world)] +
                                 [values((3,), torch.int64, j) for j in range(world)])
    same(hal_t[:world], gloo_t[:world], "all_to_all (list)")
    # The list form with unequal sizes, which gloo refuses: rank r sends rank j r + 1 copies of 100 r + j.
    received = [torch.zeros(i + 1, dtype=torch.int64) for i in range(world)]
    dist.all_to_all(received, [torch.full((rank + 1,), 100 * rank + j) for j in range(world)])
    same(received, [torch.full((i + 1,), 100 * i + rank) for i in range(world)], "all_to_all (list, unequal sizes)")
    # Gather and scatter to a root that is not rank 0.
    root = world - 1
    outs = {}
    for name, group in (("hal", None), ("gloo", gloo)):
        gathered = [torch.zeros(4) for _ in range(world)] if rank == root else None
        dist.gather(values((4,), torch.float32, 3), gathered, dst=root, group=group)
        scattered = torch.zeros(3)
        sources = [values((3,), torch.float32, 50 + j) for j in range(world)] if rank == root else None
        dist.scatter(scattered, sources, src=root, group=group)
        outs[name] = (gathered or [], scattered)
    same(outs["hal"][0], outs["gloo"][0], "gather")
    same(outs["hal"][1], outs["gloo"][1], "scatter")
    # The list forms and the coalesced ones.
    hal_t, gloo_t = both(lambda g, i, *o: dist.reduce_scatter(i, list(o), group=g),
                         lambda: [torch.zeros(3)] + [values((3,), torch.float32, 60 + j) for j in range(world)])
    same(hal_t[0], gloo_t[0], "reduce_scatter (list)")
    pg = dist.distributed_c10d._get_default_group()
    ins = [values((5,), torch.float32, 70), values((2,), torch.float32, 71)]
    outs_hal = [torch.zeros(world * 5), torch.zeros(world * 2)]
    pg.allgather_into_tensor_coalesced(outs_hal, ins).wait()
    expected = [torch.zeros(world * 5), torch.zeros(world * 2)]
    for out, inp in zip(expected, ins):
        dist.all_gather_into_tensor(out, inp, group=gloo)
    same(outs_hal, expected, "allgather_into_tensor_coalesced")
    ins = [values((world * 2,), torch.float32, 80), values((world * 3,), torch.float32, 81)]
    outs_hal = [torch.zeros(2), torch.zeros(3)]
    pg.reduce_scatter_tensor_coalesced(outs_hal, ins, torch._C._distributed_c10d.ReduceScatterOptions()).wait()
    expected = [torch.zeros(2), torch.zeros(3)]
    for out, inp in zip(expected, ins):
        dist.reduce_scatter_tensor(out, inp, group=gloo)
    same(outs_hal, expected, "reduce_scatter_tensor_coalesced")
    mine = [values((3,), torch.float32, 90), values((4,), torch.float32, 91)]
    reference = [t.clone() for t in mine]
    pg.allreduce_coalesced(mine, torch._C._distributed_c10d.AllreduceCoalescedOptions()).wait()
    for t in reference:
        dist.all_reduce(t, group=gloo)
    same(mine, reference, "allreduce_coalesced")
    # Complex: torch views it as real pairs for SUM.
    hal_t, gloo_t = both(lambda g, t: dist.all_reduce(t, group=g),
                         lambda: [torch.complex(values((4,), torch.float32, 5), values((4,), torch.float32, 6))])
    same(hal_t, gloo_t, "all_reduce complex64")
    # Non-contiguous tensors: a transposed view, reduced in place.
    hal_t, gloo_t = both(lambda g, t: dist.all_reduce(t, group=g), lambda: [values((3, 4), torch.float32, 9).t()])
    same(hal_t, gloo_t, "all_reduce on a transposed view")
    check(not hal_t[0].is_contiguous(), "the view stayed a view")
    # Point to point around the ring, and the object collectives.
    for name, group in (("hal", None), ("gloo", gloo)):
        received = torch.zeros(3)
        if rank % 2 == 0:
            dist.send(values((3,), torch.float32, 11), (rank + 1) % world, group=group)
            dist.recv(received, (rank - 1) % world, group=group)
        else:
            dist.recv(received, (rank - 1) % world, group=group)
            dist.send(values((3,), torch.float32, 11), (rank + 1) % world, group=group)
        outs[name] = received
    same(outs["hal"], outs["gloo"], "send/recv around the ring")
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank, "text": "x" * rank})
    check(objects == [{"rank": r, "text": "x" * r} for r in range(world)], f"all_gather_object gave {objects}")
    box = [{"from": rank}] if rank == root else [None]
    dist.broadcast_object_list(box, src=root)
    check(box == [{"from": root}], f"broadcast_object_list gave {box}")
    dist.barrier()
    # Async work: wait, is_completed, get_future, exception.
    t = values((1000,), torch.float32, 12)
    expected = t.clone()
    dist.all_reduce(expected, group=gloo)
    work = dist.all_reduce(t, async_op=True)
    future = work.get_future()
    check(future.wait()[0] is t, "the future's value is the reduced tensor")
    check(work.wait(datetime.timedelta(seconds=30)) and work.is_completed() and work.exception() is None,
          "a completed work says so")
    same(t, expected, "async all_reduce")
    # A subgroup: the first world - 1 ranks (rank 0 alone when world is 2).
    members = list(range(max(1, world - 1)))
    sub = dist.new_group(members, backend="hal")
    if rank in members:
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=sub)
        check(torch.equal(t, torch.full((4,), float(sum(r + 1 for r in members)))), f"subgroup all_reduce gave {t}")
    # What hal refuses, it names.
    for call, words in ((lambda: dist.all_reduce(torch.ones(2), dist.ReduceOp.BAND), "BAND"),
                        (lambda: dist.all_reduce(torch.ones(2, dtype=torch.uint16)), "uint16"),
                        (lambda: dist.all_reduce(torch.ones(2, dtype=torch.complex64), dist.ReduceOp.MAX), "MAX"),
                        (lambda: dist.broadcast(torch.ones(2), world + 3), "root rank")):
        try:
            call()
        except (hal.Error, ValueError, RuntimeError) as error:
            check(words in str(error), f"the error '{error}' does not name {words}")
        else:
            raise AssertionError(f"rank {rank}: a call naming {words} was accepted")
    description = hal_dist.describe()
    check("cpu: hal host:0" in description, f"describe() says {description}")
    print(description, flush=True)
    return cases


def run_ddp(steps=10):
    """The same Llama-style model trained with DDP on hal and on gloo: parameters equal after every run."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from hal.torch.models import CONFIGS, Llama, synthetic_batches

    config = CONFIGS["llama3-8b"].scaled(layers=2, hidden=128, heads=4, kv_heads=2, vocab=96)
    results = {}
    for name, group in (("hal", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = DistributedDataParallel(Llama(config, max_seq=32), process_group=group, bucket_cap_mb=1)
        if name == "hal":  # a communication hook: the future DDP chains on must be hal's
            model.register_comm_hook(group, default_hooks.allreduce_hook)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
        losses = []
        for tokens in synthetic_batches(config.vocab, 2, 32, steps, seed=11 + rank):
            loss = _ddp_loss(model, tokens)  # through DDP's forward, so that its hooks run
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        results[name] = (losses, [p.detach().clone() for p in model.parameters()])
    difference = max((a - b).abs().max().item() for a, b in zip(results["hal"][1], results["gloo"][1]))
    print(f"rank {rank}: ddp losses hal {results['hal'][0][-1]:.6f} gloo {results['gloo'][0][-1]:.6f}, "
          f"largest parameter difference {difference:.3g}", flush=True)
    check(difference <= 1e-5, f"DDP parameters differ by {difference} between hal and gloo")
    check(results["hal"][0][-1] < results["hal"][0][0], "the model learned")


def _ddp_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def run_fsdp(steps=5):
    """FSDP2 (fully_shard) on a mesh of hal's group and on one of gloo's: equal losses."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    from hal.torch.models import CONFIGS, Llama, synthetic_batches

    config = CONFIGS["llama3-8b"].scaled(layers=2, hidden=128, heads=4, kv_heads=2, vocab=96)
    losses = {}
    for name, group in (("hal", dist.distributed_c10d._get_default_group()), ("gloo", gloo)):
        torch.manual_seed(0)
        model = Llama(config, max_seq=32)
        mesh = DeviceMesh.from_group(group, "cpu")
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
        losses[name] = []
        for tokens in synthetic_batches(config.vocab, 2, 32, steps, seed=11 + rank):
            loss = model.loss(tokens)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    difference = max(abs(a - b) for a, b in zip(losses["hal"], losses["gloo"]))
    print(f"rank {rank}: fsdp losses hal {losses['hal']} gloo {losses['gloo']}, largest difference "
          f"{difference:.3g}", flush=True)
    check(difference <= 1e-5, f"FSDP2 losses differ by {difference} between hal and gloo")


def run_mismatch():
    """Rank 0 reduces 4 elements, the others 8: every rank gets an error naming the op, within the timeout."""
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4 if rank == 0 else 8))
    except Exception as error:  # noqa: BLE001
        print(f"rank {rank}: mismatch error after {time.monotonic() - start:.2f} s: {error}", flush=True)
        check("all_reduce" in str(error), f"the error does not name the op: {error}")
    else:
        raise AssertionError(f"rank {rank}: a size mismatch was not detected")


def run_kill():
    """Rank 1 exits inside a collective; the others' wait() raises within the timeout, naming rank 1."""
    dist.all_reduce(torch.ones(4))  # the communicator is up on every rank
    if rank == 1:
        os._exit(17)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1 << 16))
    except Exception as error:  # noqa: BLE001
        elapsed = time.monotonic() - start
        print(f"rank {rank}: peer death reported after {elapsed:.2f} s: {error}", flush=True)
        check("rank 1" in str(error), f"the error does not name rank 1: {error}")
        check(elapsed < timeout, f"the error came after {elapsed:.1f} s, past the {timeout:.0f} s timeout")
    else:
        raise AssertionError(f"rank {rank}: the collective succeeded without rank 1")
    dist.destroy_process_group()


def run_mixed():
    description = hal_dist.describe()
    check("cpu: torch's gloo" in description, f"describe() says {description}")
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), world * (world + 1) / 2)), f"all_reduce gave {t}")
    check(not dist.distributed_c10d._get_default_group().communicators, "hal made a communicator for CPU tensors")


def run_launch():
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), world * (world + 1) / 2)), f"all_reduce gave {t}")
    print(hal_dist.describe(), flush=True)


{"ops": run_ops, "ddp": run_ddp, "fsdp": run_fsdp, "mismatch": run_mismatch, "kill": run_kill,
 "launch": run_launch, "mixed": run_mixed}[mode]()
print(f"rank {rank}: ok", flush=True)
if mode != "kill":
    dist.destroy_process_group()
