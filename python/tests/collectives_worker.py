"""One rank of the collectives tests (test_collectives.py starts several): every hal.Communicator operation on
numpy arrays or torch tensors, checked against the values every rank can compute for itself. Exits non-zero with
the failed check on stderr."""
import sys

import numpy as np

import hal

kind = sys.argv[1]  # "numpy" or "torch"
if kind == "torch":
    import torch

    def array(values, dtype="float32"):
        return torch.tensor(np.asarray(values, dtype=dtype))

    def values_of(tensor):
        return tensor.numpy() if hasattr(tensor, "numpy") else np.from_dlpack(tensor)
else:
    def array(values, dtype="float32"):
        return np.array(values, dtype=dtype)

    def values_of(tensor):
        return np.asarray(tensor) if isinstance(tensor, np.ndarray) else np.from_dlpack(tensor)


def check(condition, what):
    if not condition:
        raise AssertionError(f"rank {comm.rank}: {what}")


comm = hal.Communicator.from_environment(timeout=30.0, connect_timeout=30.0)
rank, world = comm.rank, comm.world_size
print(f"rank {rank} of {world}: {comm.description}; {comm.source}", flush=True)
ranks = np.arange(world, dtype=np.float64)

x = array(np.arange(6) + 10 * rank)
returned = comm.all_reduce(x)
check(returned is x, "all_reduce works in place and returns its tensor")
check(np.array_equal(values_of(x), np.arange(6) * world + 10 * ranks.sum()), f"all_reduce sum gave {values_of(x)}")

x = array([rank + 1.0, -rank])
comm.all_reduce(x, "max")
check(np.array_equal(values_of(x), [world, 0]), f"all_reduce max gave {values_of(x)}")
x = array([2.0 * rank])
out = array([0.0])
comm.all_reduce(x, "avg", out=out)
check(values_of(out)[0] == ranks.mean() * 2 and values_of(x)[0] == 2.0 * rank, "all_reduce avg into out")

x = array([[rank, rank + 0.5]])
gathered = comm.all_gather(x)
check(tuple(gathered.shape) == (world, 1, 2), f"all_gather's default out has shape {gathered.shape}")
check(np.array_equal(values_of(gathered)[:, 0, 0], ranks), f"all_gather gave {values_of(gathered)}")

x = array(np.arange(world * 3, dtype=np.float32).reshape(world, 3) * (rank + 1))
block = comm.reduce_scatter(x)
expected = np.arange(world * 3).reshape(world, 3)[rank] * (ranks + 1).sum()
check(np.array_equal(values_of(block), expected), f"reduce_scatter gave {values_of(block)}, expected {expected}")

x = array([rank * 100.0 + j for j in range(3)], "int32")
comm.broadcast(x, root=world - 1)
check(np.array_equal(values_of(x), [(world - 1) * 100 + j for j in range(3)]), f"broadcast gave {values_of(x)}")

x = array([rank * world + j for j in range(world)])
exchanged = comm.all_to_all(x)
check(np.array_equal(values_of(exchanged), [j * world + rank for j in range(world)]), f"all_to_all gave {values_of(exchanged)}")

if world >= 2:
    if rank == 0:
        comm.send(array([3.5, 4.5]), peer=1)
    elif rank == 1:
        got = comm.recv(array([0.0, 0.0]), peer=0)
        check(np.array_equal(values_of(got), [3.5, 4.5]), f"recv gave {values_of(got)}")

# A local mistake is an error on the rank that made it, before anything is sent.
try:
    comm.all_gather(array([1.0, 2.0]), out=array([0.0] * (2 * world + 1)))
    check(False, "an all_gather whose out has the wrong size was accepted")
except hal.InvalidArgumentError as error:
    check("world size times send's elements" in str(error), f"the error says what is needed: {error}")
try:
    comm.all_reduce(array(np.ones((2, 2)))[:, :1] if kind == "torch" else np.ones((2, 2), np.float32)[:, :1])
    check(False, "a non-contiguous tensor was accepted")
except hal.InvalidArgumentError as error:
    check("not contiguous" in str(error), f"the error names contiguity: {error}")

comm.barrier()
print(f"rank {rank}: ok", flush=True)
