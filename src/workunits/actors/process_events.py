"""``ProcessWatch``: how the zygote's events for one unit's process reach whoever needs them.

The zygote client calls a unit's watch on the Reaper thread. Each event goes
where it is used, with as few tells as possible:

- ``spawned``: the pid goes straight to the supervisor (the record shows it);
  the pidfd stays here, for the one case that needs it (``lost``);
- ``exited``: when the kind's ``end_on_exit`` gives the outcome (a shell; an
  agent we killed), the end goes straight to the supervisor, and the unit's
  actor is then told only to stop; otherwise (an agent that ended by itself
  still drains its channel) the actor gets ``ProcessExited`` and reports the
  end itself;
- ``spawn_failed`` and ``lost`` go to the actor, which ends the unit.

A kill goes both ways: the zygote client SIGKILLs the process through the
pidfd held here (``kill``), at once and without waiting on the zygote, and
asks the zygote to kill the unit's group, as it would anyway.

The supervisor hears of the end exactly once whichever way it comes: the
report is claimed first (``WorkActor.claim_end``).

What the Reaper thread tells one actor during one wake (its last frames, its
channel's close, its exit) goes as one message (``Told``), sent once the wake
is over: each tell costs the actor's thread a wake-up and a turn at the GIL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import weakref
from typing import TYPE_CHECKING, Any

import pykka

from workunits._wire.actor_messages import (
    ProcessExited,
    ProcessLost,
    ProcessSpawnFailed,
    Told,
)
from workunits._zygote._linux import kill_through_pidfd
from workunits.actors.kind_code import call_kind

if TYPE_CHECKING:
    from workunits._zygote.reaper import Reaper
    from workunits.actors.base import WorkActor


class TellActor:
    """Tells to a unit's actor from another thread; False once the actor is gone.

    Given the ``reaper``, a tell made on its thread waits for the end of the wake
    and goes with the others to the same actor (``_WakeTells``); it answers True.
    """

    __slots__ = ("_reaper", "ref")

    def __init__(self, ref: pykka.ActorRef[Any], reaper: Reaper | None = None) -> None:
        self.ref = ref
        self._reaper = reaper

    def tell(self, message: object) -> bool:
        reaper = self._reaper
        if reaper is not None and reaper.on_its_thread():
            _wake_tells(reaper).add(reaper, self.ref, message)
            return True
        return _tell(self.ref, message)


def _tell(ref: pykka.ActorRef[Any], message: object) -> bool:
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        return False  # the unit was already force-ended at shutdown
    return True


class _WakeTells:
    """One Reaper's tells of the current wake, per actor in order; its thread only."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[pykka.ActorRef[Any], list[object]]] = {}

    def add(self, reaper: Reaper, ref: pykka.ActorRef[Any], message: object) -> None:
        if not self._held:
            reaper.after_wake(self._send)
        held = self._held.get(id(ref))
        if held is None:
            self._held[id(ref)] = (ref, [message])
        else:
            held[1].append(message)

    def _send(self) -> None:
        held, self._held = self._held, {}
        for ref, messages in held.values():
            _tell(ref, messages[0] if len(messages) == 1 else Told(tuple(messages)))


# Each Reaper's, made at its thread's first tell; nothing in one refers to its Reaper,
# so it goes with it. The lock: several supervisors' Reapers may make theirs at once.
_BY_REAPER: weakref.WeakKeyDictionary[Reaper, _WakeTells] = weakref.WeakKeyDictionary()
_BY_REAPER_LOCK = threading.Lock()


def _wake_tells(reaper: Reaper) -> _WakeTells:
    tells = _BY_REAPER.get(reaper)
    if tells is None:
        with _BY_REAPER_LOCK:
            tells = _BY_REAPER.setdefault(reaper, _WakeTells())
    return tells


class ProcessWatch:
    """``UnitEvents`` for one unit's process (see the module docstring); Reaper thread only."""

    __slots__ = ("_actor", "_lock", "_pidfd", "_released", "_teller")

    def __init__(self, actor: WorkActor) -> None:
        self._actor = actor
        self._teller = TellActor(actor.actor_ref, actor.unit.reaper)
        # Guards _pidfd and _released: the Reaper thread and the actor's (its stop) release.
        self._lock = threading.Lock()
        self._pidfd: int | None = None  # the unit process, from spawned until its end
        self._released = False

    def spawned(self, pid: int, pidfd: int) -> None:
        """The process exists: keep its pidfd, tell the supervisor its pid."""
        with self._lock:
            keep = not self._released
            if keep:
                self._pidfd = pidfd
        if not keep:  # the actor stopped already (a force-end at shutdown)
            os.close(pidfd)
            return
        unit = self._actor.unit
        unit.report_pid(unit.id, pid)

    def spawn_failed(self, error: str) -> None:
        """The zygote could not start it: the actor gets ``ProcessSpawnFailed``."""
        self.release()
        self._teller.tell(ProcessSpawnFailed(error))

    def exited(self, exit_code: int | None, signum: int | None, limit: str | None = None) -> None:
        """The end straight to the supervisor when ``end_on_exit`` gives it; then
        ``ProcessExited`` to the actor (to end the unit itself, or only to stop).

        ``limit``: the resource limit the zygote saw the unit's tree run into; the
        actor has it (``limit_hit``) before either hook runs.

        Both hooks are the kind's code, run on the Reaper's thread: what they raise
        is contained (``kind_code``) and logged by the Reaper, and the actor is
        told all the same, so it ends the unit (a failed ``end_on_exit`` fails it
        there too, as the actor's own failure).
        """
        self.release()
        actor = self._actor
        kind = type(actor)
        if limit is not None:
            actor.limit_hit = limit
        try:
            outcome = call_kind(kind, actor.end_on_exit, exit_code, signum)
            if outcome is not None and actor.claim_end():
                try:
                    call_kind(kind, actor.ended_on_exit, outcome)
                finally:  # claimed: nobody else reports it
                    actor.unit.report_end(actor.unit.id, outcome)  # first: the stop can wait
        finally:
            self._teller.tell(ProcessExited(exit_code, signum))

    def kill(self) -> None:
        """SIGKILL the unit's process now through its pidfd (any thread).

        No-op before ``spawned`` and after the end. The pidfd names the process
        for as long as it is open, so this can never hit a stranger; the rest of
        the unit's group is the zygote's to kill (its ``Signal``, or at the reap).
        A process that is SIGKILLed here dies even while the zygote is held up
        (stopped, or busy forking), though its end is still reported by the
        zygote's reap.
        """
        with self._lock:  # the pidfd stays open meanwhile
            if self._pidfd is not None:
                kill_through_pidfd(self._pidfd)

    def lost(self) -> None:
        """The zygote died: kill what is left of the unit's group ourselves, then tell."""
        self._kill_orphaned_group()
        self.release()
        self._teller.tell(ProcessLost())

    def _kill_orphaned_group(self) -> None:
        """Through the pidfd: a leader that is still alive pins its pid and group id, so
        the group kill cannot hit a stranger; a dead leader's stragglers were its
        zygote's to kill."""
        with self._lock:
            pidfd = self._pidfd
            if pidfd is None:
                return
            self._kill_group(pidfd)  # under the lock: the pidfd stays open meanwhile

    @staticmethod
    def _kill_group(pidfd: int) -> None:
        try:
            signal.pidfd_send_signal(pidfd, 0)
        except ProcessLookupError:
            return
        pid = _pid_of(pidfd)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        kill_through_pidfd(pidfd)

    def release(self) -> None:
        """Close the pidfd (any thread); a later ``spawned`` closes its own at once."""
        with self._lock:
            self._released = True
            pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            os.close(pidfd)


def _pid_of(pidfd: int) -> int | None:
    """The pid a pidfd refers to (from /proc/self/fdinfo), or None once it has exited."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        pass
    return None
