"""Warm processes: how many the zygote keeps forked ahead of demand, and when one ages out.

A warm process (a *spare*) is forked before any unit needs it and has done the
set-up every unit process does (session, parent-death signal, signals, the
capture), and is confined with the default protection. A Python unit is handed
to one, and in cgroup mode so is a command under the default protection (the
spare execs it); it runs exactly that unit and exits, as a freshly forked one
would: no process ever runs two units. This module is
the policy only; ``server`` forks and hands over, ``spare`` runs in the spare.

A spare not taken within ``WORKUNITS_WARM_REHEARSE_AFTER`` seconds (default
0.02; 0: at once) rehearses a unit's way in while it waits (``child.rehearse``):
its first writes to memory it shares with the zygote copy pages, ~0.4 ms that
would otherwise fall on its unit's start. Units that come back to back take
spares sooner and leave the CPU to each other.

Sizing: the pool aims at the recent peak of such units in flight plus one,
at most ``WORKUNITS_WARM_PROCESSES`` (default: the cores this process may use;
0 turns warm processes off). Spares are handed out newest first, so the oldest
is the one that demand has not reached; once it has waited
``WORKUNITS_WARM_IDLE`` seconds (default 30) it is killed and the aim drops by
one. A zygote starts
with one spare, so the first unit finds it ready.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from workunits._core.errors import InvalidArgument

PROCESSES_ENV = "WORKUNITS_WARM_PROCESSES"
IDLE_ENV = "WORKUNITS_WARM_IDLE"
REHEARSE_ENV = "WORKUNITS_WARM_REHEARSE_AFTER"
DEFAULT_IDLE = 30.0
# Units back to back take the newest spare within a unit's time (a few ms): one
# waiting longer is not in such a run, and its rehearsal takes no unit's CPU.
DEFAULT_REHEARSE_AFTER = 0.02


@dataclass(frozen=True, slots=True)
class WarmSettings:
    """At most ``processes`` spares; one unused for ``idle`` seconds ages out; one
    waiting ``rehearse_after`` seconds rehearses a unit's start."""

    processes: int
    idle: float
    rehearse_after: float = DEFAULT_REHEARSE_AFTER

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> WarmSettings:
        """Read ``WORKUNITS_WARM_PROCESSES``, ``WORKUNITS_WARM_IDLE`` and
        ``WORKUNITS_WARM_REHEARSE_AFTER``; bad values raise.

        Raises ``InvalidArgument`` naming the variable, its value and what it takes.
        """
        env = os.environ if env is None else env
        return cls(
            _processes(env.get(PROCESSES_ENV)),
            _idle(env.get(IDLE_ENV)),
            _rehearse_after(env.get(REHEARSE_ENV)),
        )

    def environment(self) -> dict[str, str]:
        """The variables that give a zygote these settings."""
        return {
            PROCESSES_ENV: str(self.processes),
            IDLE_ENV: repr(self.idle),
            REHEARSE_ENV: repr(self.rehearse_after),
        }


def _processes(text: str | None) -> int:
    if text is None or not text.strip():
        return cores()
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgument(
            f"{PROCESSES_ENV}={text!r}: expected a whole number of warm processes >= 0 "
            "(0 turns them off; unset: one per core)"
        )
    return value


def _idle(text: str | None) -> float:
    what = "the seconds an unused warm process lives"
    return _seconds(IDLE_ENV, text, DEFAULT_IDLE, what, zero_means="")


def _rehearse_after(text: str | None) -> float:
    what = "the seconds a warm process waits before it rehearses a unit's start"
    return _seconds(REHEARSE_ENV, text, DEFAULT_REHEARSE_AFTER, what, zero_means="at once")


def _seconds(name: str, text: str | None, default: float, what: str, *, zero_means: str) -> float:
    """``name``'s finite seconds, > 0, or >= 0 where 0 means something; ``default`` if unset.

    Raises ``InvalidArgument`` naming the variable, its value and what it takes.
    """
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or (zero_means and value == 0))):
        bound, zero = (">= 0", f"0: {zero_means}; ") if zero_means else ("> 0", "")
        raise InvalidArgument(
            f"{name}={text!r}: expected {what}, a number {bound} ({zero}unset: {default:g})"
        )
    return value


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(eq=False, slots=True)
class Spare:
    """One warm process: its pid (our unreaped child), our end of its assignment socket,
    and the cgroup it was forked into (cgroup mode), which becomes its unit's."""

    pid: int
    sock: socket.socket
    cgroup: str | None
    ready_at: float  # when it was forked: it ages out ``idle`` seconds later unless used


@dataclass(slots=True)
class WarmPool:
    """The spares waiting for a unit, oldest first, and how many the zygote aims at.

    Runs in the zygote's one thread; ``clock`` is injectable for tests.
    """

    settings: WarmSettings
    clock: Callable[[], float] = time.monotonic
    spares: list[Spare] = field(default_factory=list)
    aim: int = 0

    def __post_init__(self) -> None:
        self.aim = min(1, self.settings.processes)

    def __len__(self) -> int:
        return len(self.spares)

    def __iter__(self) -> Iterator[Spare]:
        return iter(self.spares)

    def pids(self) -> set[int]:
        return {spare.pid for spare in self.spares}

    def demand(self, in_flight: int) -> None:
        """``in_flight`` units of the sort spares serve run now, the one just asked for
        included.

        The aim is one more than that: a spare is replaced only once a unit has
        ended (see ``server.SPARE_HOLD``), so the next unit finds the one forked
        earlier ready rather than one still setting up.
        """
        self.aim = max(self.aim, min(in_flight + 1, self.settings.processes))

    def take(self) -> Spare | None:
        """The newest spare, for a unit; None when there is none."""
        return self.spares.pop() if self.spares else None

    def short(self) -> bool:
        """Should one more spare be forked?"""
        return len(self.spares) < self.aim

    def add(self, pid: int, sock: socket.socket, cgroup: str | None = None) -> None:
        self.spares.append(Spare(pid, sock, cgroup, self.clock()))

    def give_up(self) -> None:
        """A spare could not be made: aim at what there is until demand asks again."""
        self.aim = len(self.spares)

    def remove(self, pid: int) -> Spare | None:
        """Forget the spare ``pid`` (it died); None if it is not one."""
        for i, spare in enumerate(self.spares):
            if spare.pid == pid:
                return self.spares.pop(i)
        return None

    def aged(self) -> list[Spare]:
        """Take out the spares that waited ``idle`` seconds unused; the aim drops with each."""
        now = self.clock()
        gone: list[Spare] = []
        while self.spares and now - self.spares[0].ready_at >= self.settings.idle:
            gone.append(self.spares.pop(0))
            self.aim = max(0, self.aim - 1)
        return gone

    def next_ageing(self) -> float | None:
        """Seconds until the oldest spare ages out; None without spares."""
        if not self.spares:
            return None
        return max(0.0, self.spares[0].ready_at + self.settings.idle - self.clock())
