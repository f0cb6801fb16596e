"""Starting a benchmark's ranks on this machine: under mpirun (hal's host engine is then MPI's) or with torchrun's
variables (the 'local' launcher), and whether this process is already one rank of a launched job."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from typing import Dict, List, Optional

LAUNCHERS = ("auto", "mpirun", "local")


def launched() -> bool:
    """True in a rank that a launcher started (torchrun's, mpirun's or srun's variables are set)."""
    return any(name in os.environ for name in ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve(launcher: str) -> str:
    """'auto' is mpirun when it is installed, else local. Raises ValueError for mpirun when it is not installed."""
    mpirun = shutil.which("mpirun")
    if launcher == "auto":
        return "mpirun" if mpirun else "local"
    if launcher == "mpirun" and mpirun is None:
        raise ValueError("--launcher mpirun: mpirun is not installed (Debian: openmpi-bin)")
    return launcher


def run(arguments: List[str], ranks: int, launcher: str, environment: Optional[Dict[str, str]] = None,
        quiet_others: bool = True) -> int:
    """Runs `python -m hal.bench ARGUMENTS` as `ranks` ranks and waits; returns the worst exit status. Rank 0's
    output goes to this process's; the others' is dropped when quiet_others."""
    command = [sys.executable, "-m", "hal.bench"] + list(arguments)
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    base.update(environment or {})
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    if resolve(launcher) == "mpirun":
        forwarded = ["-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "PATH"]
        for name in (environment or {}):
            forwarded += ["-x", name]
        processes = [subprocess.Popen([shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np",
                                       str(ranks)] + forwarded + command, env=base)]
    else:
        # As mpirun's binding and torchrun's OMP_NUM_THREADS do: each rank gets its share of the CPUs, so that
        # the ranks' thread pools do not oversubscribe the machine (on 2 cores, 2 ranks of 2 spinning threads
        # each ran a step 6x slower).
        if "OMP_NUM_THREADS" not in base:
            base["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // ranks))
        processes = []
        for rank in range(ranks):
            env = dict(base, RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(ranks))
            processes.append(subprocess.Popen(command, env=env,
                                              stdout=subprocess.DEVNULL if rank and quiet_others else None))
    return max((p.wait() for p in processes), key=abs)
