"""torch.distributed's backend "hal" against torch's own gloo in the same processes (distributed_worker.py): every
op x dtype x reduce op on 2 and 3 ranks, DDP and FSDP2 training, faults, and the launchers."""
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

WORKER = Path(__file__).with_name("distributed_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode, world=2, timeout=240, extra_env=None):
    """world ranks with torchrun's variables; returns their (returncode, output) in rank order."""
    port = free_port()
    processes = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **(extra_env or {}))
        processes.append(subprocess.Popen([sys.executable, str(WORKER), mode], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    results = []
    try:
        for process in processes:
            output, _ = process.communicate(timeout=timeout)
            results.append((process.returncode, output))
    finally:
        for process in processes:
            process.kill()
    return results


def assert_ok(results):
    for rank, (code, output) in enumerate(results):
        assert code == 0 and f"rank {rank}: ok" in output, f"rank {rank} exited {code}:\n{output}"
        assert "nanobind: leaked" not in output, f"rank {rank} left hal objects alive at exit:\n{output}"


@pytest.mark.parametrize("world", [2, 3])
def test_every_op_dtype_and_reduce_op_matches_gloo(world):
    results = launch("ops", world)
    assert_ok(results)
    assert "gloo" in results[0][1]  # describe() names the engine


def test_ddp_parameters_equal_to_gloo():
    assert_ok(launch("ddp"))


def test_fsdp2_losses_equal_to_gloo():
    assert_ok(launch("fsdp"))


def test_a_mixed_backend_string_gives_cpu_tensors_to_gloo():
    assert_ok(launch("mixed"))


def test_size_mismatch_is_an_error_on_every_rank():
    """Under torch's switch for collective checks, a count mismatch is an error naming each rank's call (without
    it, Gloo ends the process on a count mismatch, as under torch's own gloo backend)."""
    results = launch("mismatch", extra_env={"HAL_TEST_TIMEOUT": "20", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
                     timeout=120)
    assert_ok(results)
    for rank, (_, output) in enumerate(results):
        assert "rank 0: all_reduce count=4" in output and "rank 1: all_reduce count=8" in output, output


def test_killed_rank_is_named_within_the_timeout():
    start = time.monotonic()
    results = launch("kill", world=3, extra_env={"HAL_TEST_TIMEOUT": "20"}, timeout=120)
    assert results[1][0] == 17, results[1][1]
    for rank in (0, 2):
        code, output = results[rank]
        assert code == 0 and f"rank {rank}: ok" in output, f"rank {rank} exited {code}:\n{output}"
    assert time.monotonic() - start < 100


def test_under_torchrun():
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        torchrun = shutil.which("torchrun")
    assert torchrun, "torch is installed but torchrun is not beside the interpreter"
    result = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", str(WORKER), "launch"],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0: ok" in result.stdout and "rank 1: ok" in result.stdout


def test_under_mpirun():
    """mpirun sets no RANK: import hal.torch fills RANK/WORLD_SIZE from OMPI_COMM_WORLD_*; the ranks share this
    host, so the host engine is the shared-memory one, with MPI's beside it for the other operations."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    command = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "MASTER_ADDR", "-x",
               "MASTER_PORT", "-x", "PATH", sys.executable, str(WORKER), "launch"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0: ok" in result.stdout and "rank 1: ok" in result.stdout
    assert "cpu: hal host:0, shm (" in result.stdout and "other operations: mpi (" in result.stdout, result.stdout


def test_under_halrun():
    halrun = os.environ.get("HAL_TEST_HALRUN") or shutil.which("halrun")
    if not halrun:
        candidate = Path(__file__).resolve().parents[2] / "build" / "bin" / "halrun"
        halrun = str(candidate) if candidate.exists() else None
    if not halrun:
        pytest.skip("halrun is not built (build/bin/halrun) nor on PATH")
    result = subprocess.run([halrun, "-n", "2", sys.executable, str(WORKER), "launch"], capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0: ok" in result.stdout and "rank 1: ok" in result.stdout


def test_backend_is_registered_on_import():
    import torch.distributed as dist

    import hal.torch  # noqa: F401

    assert "HAL" in dist.Backend._plugins
    assert dist.Backend("hal") == "hal"
