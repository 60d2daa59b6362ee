"""How a unit's end takes every process it started, however they escaped.

A unit's descendants may leave its process group (``setsid``, ``setpgid``, a
double fork), so killing the group is not enough. Two mechanisms, picked once
per zygote at start:

``cgroup``
    A cgroup v2 directory per unit, under one directory per zygote, below the
    cgroup this process already runs in. Each unit process is forked (or
    spawned) inside its cgroup; at the unit's end one write to ``cgroup.kill``
    kills every process in it at once, however it escaped, forks racing the
    kill included. Needs a cgroup v2 hierarchy, ``cgroup.kill`` (Linux 5.14)
    and the right to create a cgroup under our own and move processes into it
    (root, or a delegated subtree such as a systemd user service).

``subreaper``
    Every unit process is a child subreaper (``PR_SET_CHILD_SUBREAPER``):
    agents themselves, and for a shell a small keeper process of ours that
    spawns the command (the command is not ours to change). An orphan comes
    back to the closest living subreaper, so while a unit lives its orphans
    stay under it; once it is gone they come back to the zygote, which kills
    every child that is not a live unit. Misses what leaves the process tree
    altogether (work handed to another daemon: ``systemd-run``, ``at``, ``ssh``),
    and kills by rounds (a child, then its orphans), so a process that forks
    faster than the rounds may take several.

Either way a guard process above the zygote catches what a SIGKILLed zygote
leaves (see ``guard``); what a SIGKILLed guard leaves (its emptied cgroups) the
next zygote to start under the same cgroup removes (``remove_stale``).
``WORKUNITS_CONTAINMENT=subreaper`` forces the weaker mechanism (tests;
machines where cgroups misbehave); the default, ``auto``, uses cgroups when
this process may.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from dataclasses import dataclass

from workunits._unit.descendants import cgroup2_mountinfo, cgroup_of
from workunits._util.procid import pid_exists

ENV = "WORKUNITS_CONTAINMENT"
AUTO = "auto"
SUBREAPER = "subreaper"
CHOICES = (AUTO, SUBREAPER)


@dataclass(frozen=True, slots=True)
class Probe:
    """What ``probe`` found: the cgroup v2 directory we may use, or why not."""

    own: str | None  # this process's cgroup directory, when there is a v2 hierarchy
    reason: str  # why cgroups are (not) used, for ``workunits doctor``


def wanted() -> str:
    """The mechanism asked for in the environment (``auto`` when unset or unknown)."""
    value = os.environ.get(ENV, AUTO).strip().lower()
    return value if value in CHOICES else AUTO


def own_cgroup() -> str | None:
    """This process's cgroup v2 directory (mount point + path), or None without v2."""
    return cgroup_of("self")


def inside(path: str, directories: set[str]) -> bool:
    """Whether cgroup ``path`` is one of ``directories`` or below one of them."""
    while path not in directories:
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return True

    return None


class Cgroups:
    """The zygote's cgroup directory and one child directory per unit.

    Used by the zygote (single-threaded) and, after the zygote is gone, by its
    guard. The zygote moves itself into a unit's cgroup just for the fork or
    spawn, so the child starts inside it (no window in which it could fork
    outside), then moves back through a descriptor held open for that. A warm
    process is forked into a directory of its own, which becomes its unit's.
    """

    def __init__(self, own: str, root: str) -> None:
        self.own = own
        self.root = root  # holds no process itself, only the units' directories
        self._home = os.open(os.path.join(own, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        self._spares = 0  # warm processes' directories made so far (names them)

    @classmethod
    def create(cls, name: str) -> Cgroups | None:
        """Make ``name`` under our own cgroup and check that we may use it; None if not.

        Removes what zygotes gone unclean left beside it first (``remove_stale``).
        """
        found = probe(name)
        if found.own is None:
            return None
        remove_stale(found.own, keep=name)
        return cls(found.own, os.path.join(found.own, name))

    def unit_dir(self, unit_id: str) -> str:
        path = os.path.join(self.root, unit_id)
        with contextlib.suppress(FileExistsError):  # a resumed attempt of a unit
            os.mkdir(path)
        return path

    def enter(self, path: str) -> None:
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def spare_dir(self) -> str:
        """A new directory for a warm process, later its unit's (cgroup v2 renames nothing)."""
        self._spares += 1
        path = os.path.join(self.root, f"warm-{self._spares}")
        with contextlib.suppress(FileExistsError):  # left by a killed spare still dying
            os.mkdir(path)
        return path

    def close(self) -> None:
        """In a forked child: drop the descriptor of our own cgroup (it is the zygote's)."""
        os.close(self._home)

    def leave(self) -> None:
        """Back to our own cgroup: must not fail, so its descriptor is already open."""
        os.write(self._home, b"0")

    @staticmethod
    def kill(path: str) -> None:
        """SIGKILL every process in ``path`` and below, at once (a no-op once it is gone)."""
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fd = os.open(os.path.join(path, "cgroup.kill"), os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, b"1")
            finally:
                os.close(fd)

    @staticmethod
    def remove(path: str) -> bool:
        """Remove an emptied unit directory; False while processes are still dying in it."""
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                return False
            raise
        return True

    def remove_all(self) -> bool:
        """Kill and remove every unit directory and the root; False if some remain."""
        self.kill(self.root)
        done = True
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if entry.is_dir(follow_symlinks=False):
                    done = self.remove(entry.path) and done
        return done and self.remove(self.root)


# The directories this module makes under a process's own cgroup, named after the
# process that made them: a zygote's guard, ``probe``, ``time_a_move``.
_OURS = re.compile(r"workunits-(?:probe-|move-)?([0-9]+)", re.ASCII)


def remove_stale(own: str, *, keep: str | None = None) -> list[str]:
    """Remove, under ``own``, the cgroups of ours whose maker is gone and that hold no
    process; the names removed.

    A guard that is SIGKILLed (a supervisor closing during its zygote's start
    kills it so) leaves its zygote's directory behind, and each left one holds
    kernel memory for as long as it exists. One whose maker lives, or that
    still holds a process, is not ours to touch: it is left as it is.
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(own))
    except OSError:
        return removed
    for entry in entries:
        found = _OURS.fullmatch(entry.name)
        if found is None or entry.name == keep or not entry.is_dir(follow_symlinks=False):
            continue
        if pid_exists(int(found.group(1))) or _populated(entry.path):
            continue
        if _remove_tree(entry.path):
            removed.append(entry.name)
    return removed


def _populated(path: str) -> bool:
    """True when a process is in ``path`` or below (or when that cannot be read)."""
    try:
        with open(os.path.join(path, "cgroup.events"), encoding="ascii") as f:
            return "populated 0" not in f.read().splitlines()
    except OSError:
        return True


def _remove_tree(path: str) -> bool:
    """Remove the empty cgroup ``path`` and its children, deepest first; False if any stays."""
    done = True
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                done = _remove_tree(entry.path) and done
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return done
    except OSError:
        return False
    return done


def probe(name: str | None = None) -> Probe:
    """May this process use a cgroup per unit? Makes the directory ``name`` when it may.

    With ``name`` None (``workunits doctor``) it makes and removes a scratch one.
    """
    if wanted() == SUBREAPER:
        return Probe(None, f"switched off ({ENV}=subreaper)")
    own = own_cgroup()
    if own is None:
        return Probe(None, "no cgroup v2 hierarchy is mounted")
    scratch = name is None
    path = os.path.join(own, name or f"workunits-probe-{os.getpid()}")
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except OSError as exc:
        return Probe(None, f"cannot create a cgroup under {own}: {exc.strerror}")
    reason = _unusable(own, path)
    if scratch or reason is not None:
        with contextlib.suppress(OSError):
            os.rmdir(path)
    if reason is not None:
        return Probe(None, reason)
    return Probe(own, f"a cgroup per unit under {own}")


def favors_moves() -> bool | None:
    """Whether the cgroup v2 hierarchy is mounted with ``favordynmods``; None without one.

    Without it (the kernel's default) moving a process between cgroups, as the
    zygote does for every unit it forks or spawns, first waits for an RCU grace
    period unless another move happened in the last few milliseconds: units
    started one at a time, with pauses between them, each wait that long.
    """
    found = cgroup2_mountinfo()
    return None if found is None else "favordynmods" in found[1]


def time_a_move(own: str, pause: float) -> float:
    """Seconds this process takes to move into a scratch cgroup under ``own`` after
    ``pause`` seconds without a move of ours (it moves back, and the scratch goes)."""
    path = os.path.join(own, f"workunits-move-{os.getpid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    home = os.open(os.path.join(own, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    try:
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            time.sleep(pause)
            start = time.perf_counter()
            os.write(fd, b"0")
            took = time.perf_counter() - start
        finally:
            os.close(fd)
            os.write(home, b"0")
    finally:
        os.close(home)
        with contextlib.suppress(OSError):
            os.rmdir(path)
    return took


def _unusable(own: str, path: str) -> str | None:
    """Why the fresh cgroup ``path`` under ``own`` cannot hold units; None if it can."""
    if not os.path.exists(os.path.join(path, "cgroup.kill")):
        return "this kernel has no cgroup.kill (Linux 5.14 or later has)"
    for procs in (os.path.join(path, "cgroup.procs"), os.path.join(own, "cgroup.procs")):
        if not os.access(procs, os.W_OK):
            return f"cannot move processes between cgroups under {own}"
    return None
