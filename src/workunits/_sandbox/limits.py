"""A unit's resource limits: cgroups for the whole tree where we may, rlimits otherwise.

Per resource, the strongest mechanism this process may use:

``memory``   a memory cgroup (v2 ``memory.max`` where the controller is
             delegated to us, else v1 ``memory.limit_in_bytes`` where that
             hierarchy is writable, as for root); else ``RLIMIT_AS`` per process.
``processes``  a pids cgroup (v2 ``pids.max``, else v1); else, for a user other
             than root, ``RLIMIT_NPROC`` inside a user namespace of the unit's own,
             where it counts the unit's processes and threads alone.
``cpu_seconds``  ``RLIMIT_CPU`` per process (SIGXCPU, then SIGKILL a second
             later); with a cgroup per unit (``containment``), the zygote also
             reads the unit's ``cpu.stat`` and ends it once the tree has used it.
``file_size``, ``open_files``  ``RLIMIT_FSIZE`` and ``RLIMIT_NOFILE``: per
             process by nature (a file is as large as its largest write).

A cgroup tells why a unit ended: ``oom_kill`` in ``memory.events`` (v2) or
``memory.oom_control`` (v1), ``max`` in ``pids.events`` (a fork it refused).
The zygote makes one directory per limited unit under a directory of its own
in each hierarchy (``workunits-PID``, as ``containment`` does), the unit
process moves itself in before anything else, and the zygote reads the
counters and removes the directories once the unit has ended.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
from dataclasses import dataclass

MEMORY = "memory"
PIDS = "pids"

# mountinfo: id parent major:minor root mount-point options... - cgroup source super-options
_V1_MOUNT = re.compile(r"\S+ \S+ \S+ \S+ (\S+) .* - cgroup \S+ (\S+)")


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """A v1 hierarchy's directory for this process (``own``), for one controller."""

    controller: str
    own: str

    def usable(self) -> bool:
        """We may make directories here and move processes into them."""
        return os.access(self.own, os.W_OK) and os.access(
            os.path.join(self.own, "cgroup.procs"), os.W_OK
        )


def v1_hierarchies() -> dict[str, Hierarchy]:
    """The writable v1 memory and pids hierarchies, by controller."""
    found = {}
    for controller, own in _own_v1().items():
        place = Hierarchy(controller, own)
        if place.usable():
            found[controller] = place
    return found


def v2_offered(directory: str) -> set[str]:
    """The controllers (of memory and pids) cgroup v2 ``directory`` may enable for its
    children: what its parent delegated to it."""
    try:
        with open(os.path.join(directory, "cgroup.controllers"), encoding="ascii") as f:
            return set(f.read().split()) & {MEMORY, PIDS}
    except OSError:
        return set()


def enable_v2(directory: str) -> set[str]:
    """Enable the memory and pids controllers for ``directory``'s children (the zygote's
    cgroup root, which holds no process); those now enabled."""
    enabled = set()
    for controller in sorted(v2_offered(directory)):
        try:
            _write(directory, "cgroup.subtree_control", f"+{controller}")
        except OSError:
            continue
        enabled.add(controller)
    return enabled


def write_v2(unit_dir: str, memory: int | None, processes: int | None) -> None:
    """A unit's limits in its own cgroup v2 directory (``containment``'s)."""
    if memory is not None:
        _write(unit_dir, "memory.max", memory)
        with contextlib.suppress(OSError):  # no swapping out of the limit
            _write(unit_dir, "memory.swap.max", 0)
    if processes is not None:
        _write(unit_dir, "pids.max", processes)


def _own_v1() -> dict[str, str]:
    """This process's cgroup directory in each v1 hierarchy of memory or pids."""
    mounts: dict[str, str] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                match = _V1_MOUNT.match(line)
                if match is None:
                    continue
                for option in match.group(2).split(","):
                    if option in (MEMORY, PIDS):
                        mounts[option] = match.group(1)
        paths: dict[str, str] = {}
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(","):
                    if controller in mounts:
                        paths[controller] = os.path.join(mounts[controller], path.lstrip("/"))
    except (OSError, ValueError):
        return {}
    return paths


class UnitCgroups:
    """The zygote's v1 directories for units' limits, one per controller (single-threaded:
    the zygote, then its guard, which removes what is left)."""

    def __init__(self, name: str, places: dict[str, Hierarchy]) -> None:
        self.paths: dict[str, str] = {}
        for controller, place in places.items():
            root = os.path.join(place.own, name)
            try:
                os.mkdir(root)
            except FileExistsError:
                pass
            except OSError:
                continue
            self.paths[controller] = root

    def has(self, controller: str) -> bool:
        return controller in self.paths

    def unit_path(self, controller: str, unit_id: str) -> str:
        return os.path.join(self.paths[controller], unit_id)

    def prepare(self, unit_id: str, memory: int | None, processes: int | None) -> tuple[str, ...]:
        """Directories for the unit with its limits written (the unit process joins them)."""
        made: list[str] = []
        for controller, limit in ((MEMORY, memory), (PIDS, processes)):
            if limit is None or controller not in self.paths:
                continue
            path = os.path.join(self.paths[controller], unit_id)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)
            made.append(path)
            _write(path, "memory.limit_in_bytes" if controller == MEMORY else "pids.max", limit)
        return tuple(made)

    def remove_all(self) -> bool:
        """Remove every unit directory and our roots (the guard, at the end); False if
        some remain."""
        done = True
        for root in self.paths.values():
            with contextlib.suppress(OSError):
                for entry in os.scandir(root):
                    if entry.is_dir(follow_symlinks=False):
                        done = remove((entry.path,)) and done
            done = remove((root,)) and done
        return done


def join(paths: tuple[str, ...]) -> None:
    """In the unit process, before it starts anything: move into its limit cgroups."""
    for path in paths:
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def hit(paths: tuple[str, ...]) -> str | None:
    """Which limit the unit's tree ran into, from its cgroups' counters; None if none."""
    for path in paths:
        if _counter(path, "memory.events", "oom_kill") or _counter(
            path, "memory.oom_control", "oom_kill"
        ):
            return "memory-limit"
        if _counter(path, "pids.events", "max"):
            return "processes-limit"
    return None


def remove(paths: tuple[str, ...]) -> bool:
    """Remove the unit's limit directories; False while a process is still leaving one."""
    done = True
    for path in paths:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            done = False
    return done


def oom_killed(path: str) -> bool:
    """Whether the OOM killer has killed a process in cgroup ``path`` (v2 or v1)."""
    for filename in ("memory.events", "memory.oom_control"):
        count = _counter(path, filename, "oom_kill")
        if count:
            return True
    return False


def procs(path: str) -> list[int]:
    """The processes in cgroup ``path`` (empty when it is gone)."""
    try:
        with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def cpu_used(cgroup: str) -> float | None:
    """Seconds of CPU the processes of cgroup v2 ``cgroup`` have used; None if unreadable."""
    value = _counter(cgroup, "cpu.stat", "usage_usec")
    return None if value is None else value / 1e6


def _counter(path: str, filename: str, key: str) -> int | None:
    try:
        with open(os.path.join(path, filename), encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def _write(path: str, filename: str, value: int | str) -> None:
    with open(os.path.join(path, filename), "w", encoding="ascii") as f:
        f.write(str(value))


def rlimits(
    *,
    memory: int | None,
    cpu_seconds: float | None,
    processes: int | None,
    file_size: int | None,
    open_files: int | None,
) -> tuple[tuple[int, int, int], ...]:
    """``(resource, soft, hard)`` for the limits given here (None: not set this way)."""
    out: list[tuple[int, int, int]] = []
    if memory is not None:
        out.append((resource.RLIMIT_AS, memory, memory))
    if cpu_seconds is not None:
        soft = max(1, math.ceil(cpu_seconds))
        out.append((resource.RLIMIT_CPU, soft, soft + 1))  # SIGXCPU, then SIGKILL
    if processes is not None:
        out.append((resource.RLIMIT_NPROC, processes, processes))
    if file_size is not None:
        out.append((resource.RLIMIT_FSIZE, file_size, file_size))
    if open_files is not None:
        out.append((resource.RLIMIT_NOFILE, open_files, open_files))
    return tuple(out)


def apply_rlimits(limits: tuple[tuple[int, int, int], ...]) -> None:
    """Set each limit, never above what is set already (an output cap, a smaller hard one)."""
    for which, soft_wanted, hard_wanted in limits:
        old_soft, old_hard = resource.getrlimit(which)
        hard = hard_wanted if old_hard == resource.RLIM_INFINITY else min(hard_wanted, old_hard)
        soft = soft_wanted
        if which == resource.RLIMIT_FSIZE and old_soft != resource.RLIM_INFINITY:
            soft = min(soft, old_soft)  # an output cap already lower stays
        resource.setrlimit(which, (min(soft, hard), hard))
