"""Measurements shared by the fault tests: this process's RSS and descriptors."""

from __future__ import annotations


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size (VmRSS) of ``pid``, in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


MIB = 1024 * 1024
