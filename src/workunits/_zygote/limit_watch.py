"""The zygote's watch over units' limits that hold for the whole tree.

Two limits the kernel does not end a unit for by itself: CPU seconds (the
tree's sum, read from the unit's cgroup v2 ``cpu.stat``) and memory (the OOM
killer of a memory cgroup kills one process of the tree, maybe a grandchild,
and the unit goes on). A unit past either ends whole, its reason the limit,
as systemd's ``OOMPolicy=stop`` ends a service. The zygote's loop runs the
watch every ``EVERY`` seconds while some unit has such a limit; the rest of the
time it costs nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from workunits._sandbox.limits import cpu_used, oom_killed, procs

EVERY = 0.1  # seconds between two looks at the watched units' cgroups


class Watched(Protocol):
    """What the watch reads of a unit (the zygote's ``Slot``)."""

    cgroup: str | None
    cpu_limit: float | None
    hit: str | None

    @property
    def memory_dir(self) -> str | None: ...


def watched(slot: Watched) -> bool:
    cpu = slot.cpu_limit is not None and slot.cgroup is not None
    return slot.hit is None and (cpu or slot.memory_dir is not None)


class LimitWatch:
    """When to look next (the zygote's thread only)."""

    def __init__(self) -> None:
        self.next_at = 0.0

    def timeout(self, slots: Iterable[Watched]) -> float | None:
        """How long the zygote may sleep before the next look; None: no unit is watched."""
        if not any(watched(s) for s in slots):
            return None
        return max(0.0, self.next_at - time.monotonic())

    def run(self, slots: Iterable[Watched], kill: Callable[[Watched], None]) -> None:
        """End (``kill``) each watched unit past its CPU seconds or OOM-killed in part."""
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + EVERY
        for slot in slots:
            if not watched(slot):
                continue
            if slot.memory_dir is not None and oom_killed(slot.memory_dir):
                slot.hit = "memory-limit"
            elif slot.cpu_limit is not None and slot.cgroup is not None:
                used = cpu_used(slot.cgroup)
                if used is not None and used >= slot.cpu_limit:
                    slot.hit = "cpu-limit"
            if slot.hit is not None:
                kill(slot)


def kill_cgroup_members(path: str) -> None:
    """SIGKILL every process in cgroup ``path`` (v1 has no cgroup.kill), round by round."""
    for _ in range(100):
        members = procs(path)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
