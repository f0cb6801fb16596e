"""This process's resident memory, from /proc (Linux): what the host benchmarks measure memory with."""

from __future__ import annotations


def status_bytes(field: str) -> int:
    """VmHWM (peak resident) or VmRSS (resident now) of this process, from /proc/self/status; 0 when absent."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_resident() -> bool:
    """Resets VmHWM to the resident size now; False when the kernel does not let this process."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return True
