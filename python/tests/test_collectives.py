"""hal.Communicator across processes: two ranks started the way launchers start them (torchrun's variables, and
torchrun itself), every operation on numpy arrays and on torch tensors (collectives_worker.py)."""
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import hal

WORKER = Path(__file__).with_name("collectives_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(kind, world=2, timeout=120):
    """Starts world ranks with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set as torchrun and halrun set
    them; returns their (returncode, output) in rank order."""
    port = free_port()
    processes = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), HAL_COLL_ENGINE="gloo")
        processes.append(subprocess.Popen([sys.executable, str(WORKER), kind], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    results = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise
        results.append((process.returncode, output))
    return results


@pytest.mark.parametrize("world", [2, 3])
def test_every_operation_on_numpy(world):
    for rank, (code, output) in enumerate(launch("numpy", world)):
        assert code == 0, f"rank {rank} failed:\n{output}"
        assert f"rank {rank}: ok" in output
        assert "gloo" in output  # the description names the engine


def test_every_operation_on_torch_tensors():
    pytest.importorskip("torch")
    for rank, (code, output) in enumerate(launch("torch")):
        assert code == 0, f"rank {rank} failed:\n{output}"
        assert f"rank {rank}: ok" in output


def test_under_torchrun():
    """torchrun itself: its agent already serves a store on MASTER_PORT, so hal must meet elsewhere."""
    pytest.importorskip("torch")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        torchrun = shutil.which("torchrun")
    assert torchrun, "torch is installed but torchrun is not beside the interpreter"
    result = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", str(WORKER), "torch"],
                            env=dict(os.environ, HAL_COLL_ENGINE="gloo"), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0: ok" in result.stdout and "rank 1: ok" in result.stdout


def test_from_environment_without_a_launcher(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(hal.InvalidArgumentError, match="no launcher environment"):
        hal.Communicator.from_environment()


def test_bad_timeout_names_the_value(monkeypatch):
    with pytest.raises(hal.InvalidArgumentError, match="connect_timeout is -1"):
        hal.Communicator.from_environment(connect_timeout=-1)


def test_single_rank_communicator(tmp_path, monkeypatch):
    """A world of one runs every operation in-process (a FileStore in a temporary directory)."""
    import numpy as np
    for name, value in dict(RANK="0", WORLD_SIZE="1", HAL_STORE_DIR=str(tmp_path), HAL_COLL_ENGINE="gloo").items():
        monkeypatch.setenv(name, value)
    comm = hal.Communicator.from_environment(timeout=10.0)
    assert (comm.rank, comm.world_size) == (0, 1)
    assert "HAL_STORE_DIR" in comm.source
    x = np.arange(4, dtype=np.float64)
    comm.all_reduce(x, "prod")
    assert np.array_equal(x, np.arange(4))
    with pytest.raises(hal.InvalidArgumentError, match="op 'mean' is not one of"):
        comm.all_reduce(x, "mean")
    with pytest.raises(hal.InvalidArgumentError, match="send is f64 but recv is f32"):
        comm.all_reduce(x, out=np.zeros(4, np.float32))
    assert comm.split(color=-1) is None
