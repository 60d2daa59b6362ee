"""What the supervisor holds for one unit beside its record: its ``UnitSlot``.

One slot per unit in memory (``Units`` keeps the table, in step with the
registry), so a unit's end or eviction clears one object, not a field in each
of several dicts that every cleanup path must remember.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pykka

from workunits._core.status import Reason
from workunits._ledger import Write
from workunits.actors.base import WorkActor
from workunits.supervisor.actor.unit_input import UnitInput

if TYPE_CHECKING:
    from workunits._ledger.attempts import ProgressItem


class Ending(enum.Enum):
    """How a running unit is being ended. No other value; KILL is where CANCEL escalates."""

    CANCEL = "cancel"  # asked to stop; killed when its grace is over
    KILL = "kill"  # killed; its end is on its way
    STOP = "stop"  # a teammate stopping after the messages already sent


@dataclass(slots=True, eq=False)
class UnitSlot:
    """One unit's live state in the supervisor; its record stays in the registry.

    Invariants (kept by ``Starts``, ``UnitControl`` and ``TerminalTransition``):
    ``actor``, ``output_cap``, ``ending`` and ``asked`` are set only while the record is
    ``running`` (the terminal transition clears them); ``pid`` only until the
    next tick or the terminal write, which carries it; ``progress`` until the
    next tick; ``read_fd`` is open
    while the output file exists and someone reads it, and after the end only
    while a retained reader still lags (the file is gone, the descriptor keeps
    it readable); ``suspended`` (a deploy stopped it: no terminal write, no
    notice) only during shutdown.
    """

    actor: pykka.ActorRef[WorkActor] | None = None
    output_cap: int | None = None
    ending: Ending | None = None
    # The reason of the first kill or cancel accepted (answered True): the unit ends
    # ``killed`` for it, whatever its process did meanwhile (``UnitControl.as_asked``).
    asked: Reason | None = None
    read_fd: int | None = None
    pid: Write | None = None  # to record at the next tick (ls/show only)
    progress: ProgressItem | None = None  # likewise, grouped per tick
    # Cancel and kill requests from other processes (by seq) that the terminal write answers.
    end_requests: list[int] = field(default_factory=list)
    suspended: bool = False
    # Came from the ledger (a client's submit, a resume), not from this facade:
    # its notice is read from the ledger, so its record need not wait for it.
    adopted: bool = False
    # How to start the unit again: kept from its first start while it is in
    # memory, for its retries and for ``retry(id)`` (``supervisor.actor.retries``).
    launch: Launch | None = None
    timeout_at: float | None = None  # the running attempt's own time limit
    # Activity, for ``stall_after`` (``supervisor.actor.activity``): the last progress,
    # checkpoint, output growth or start; whether this quiet spell was reported.
    quiet_since: float = 0.0
    output_seen: int = 0  # the output file's size at the last look, and when that was
    output_checked_at: float = 0.0
    stalled: bool = False
    # The pipe of a unit started with ``stdin=True``, from its admission to its end.
    input: UnitInput | None = None

    def close_input(self) -> None:
        if self.input is not None:
            self.input.close()
            self.input = None

    # Written ``running``, its actor waiting for that write to land (``Starts._start``):
    # it holds its kind's slot as a running unit does.
    starting: bool = False


@dataclass(frozen=True, slots=True)
class Launch:
    """What starting a unit's actor takes besides its record: kept for its next attempt."""

    actor_class: type[WorkActor]
    spec: Any
    timeout: float | None
