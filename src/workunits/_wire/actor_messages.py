"""Messages between a unit's actor and the supervisor actor, and zygote events for an actor.

Plain frozen data, below the actors and the supervisor, so that neither has to
import the other to speak (no pykka, no sqlite3 here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workunits._core.record import MonitorEvent, StallEvent, WorkRecord
from workunits._core.status import Reason
from workunits._wire import frames as m

# -- from the supervisor to a unit's actor -----------------------------------------


@dataclass(frozen=True, slots=True)
class Kill:
    reason: Reason


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: Reason


@dataclass(frozen=True, slots=True)
class Escalate:
    pass


@dataclass(frozen=True, slots=True)
class ProcessSpawnFailed:
    """The zygote could not start the unit's process (told to its actor)."""

    error: str


@dataclass(frozen=True, slots=True)
class Told:
    """Several messages for one actor, told from one Reaper wake, in order (one tell:
    a unit's last frame, its channel's close and its exit often come together)."""

    messages: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class ProcessExited:
    """The unit's process exited: its code, or the signal that ended it (told to its actor)."""

    exit_code: int | None
    signal: int | None


@dataclass(frozen=True, slots=True)
class ProcessLost:
    """The zygote that forked the unit's process died; the watch killed what was left."""


@dataclass(frozen=True, slots=True)
class ProgressReport:
    work_id: str
    fraction: float | None
    message: str
    evidence: Mapping[str, Any] | None = None  # ctx.progress(..., done=3, total=8)


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    work_id: str
    attempt: int
    state: bytes
    consumed: tuple[int, ...] = ()  # signals consumed with this checkpoint


# Where a unit's request is answered: None, its channel (through its actor); else a
# route of its own (a ``workunits`` command in the unit, through the gateway).
ReplyRoute = Callable[[bool, Any], None]


@dataclass(frozen=True, slots=True)
class SpawnChild:
    parent: str
    request: m.Spawn | m.SpawnMany
    reply: ReplyRoute | None = None


@dataclass(frozen=True, slots=True)
class ControlChild:
    parent: str
    request: m.Control
    reply: ReplyRoute | None = None


@dataclass(frozen=True, slots=True)
class SendFromUnit:
    """The unit tells or asks a teammate by ID; the supervisor routes it."""

    sender: str
    request: m.Send


@dataclass(frozen=True, slots=True)
class ReplyToUnit:
    reply: m.Reply


@dataclass(frozen=True, slots=True)
class ChildEndedToUnit:
    record: WorkRecord
    redelivered: bool = False  # see frames.ChildEnded


@dataclass(frozen=True, slots=True)
class EventToUnit:
    """For the unit's process: a monitor's event or a child's stall (for its in-process
    mailbox), or a signal it may be waiting for."""

    event: MonitorEvent | StallEvent | m.SignalArrived


@dataclass(frozen=True, slots=True)
class DeliverToUnit:
    """Supervisor -> teammate actor: pass this frame to the process."""

    frame: m.Deliver


@dataclass(frozen=True, slots=True)
class StopTeammate:
    """Supervisor -> teammate actor: stop after the messages already delivered."""


@dataclass(frozen=True, slots=True)
class Answered:
    """Teammate actor -> supervisor: the process answered an ask."""

    work_id: str
    answer: m.Answer


@dataclass(frozen=True, slots=True)
class MonitorEventReport:
    """Monitor actor -> supervisor: an event for the monitor's parent."""

    event: MonitorEvent


@dataclass(frozen=True, slots=True)
class ChildNoticeTaken:
    """Unit actor -> supervisor: the unit's process acknowledged a child's notice."""

    work_id: str
    status: str
