"""What the supervisor holds for one unit beside its record: its ``Slot``.

One slot per unit in memory (``Units`` keeps the table, in step with the
registry), so a unit's end or eviction clears one object, not a field in each
of several dicts that every cleanup path must remember.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pykka

from workunits._ledger import Write
from workunits.actors.base import WorkActor


class Ending(enum.Enum):
    """How a running unit is being ended. No other value; KILL is where CANCEL escalates."""

    CANCEL = "cancel"  # asked to stop; killed when its grace is over
    KILL = "kill"  # killed; its end is on its way
    STOP = "stop"  # a teammate stopping after the messages already sent


@dataclass(slots=True, eq=False)
class Slot:
    """One unit's live state in the supervisor; its record stays in the registry.

    Invariants (kept by ``Starts``, ``Control`` and ``TerminalTransition``):
    ``actor``, ``output_cap`` and ``ending`` are set only while the record is
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
    read_fd: int | None = None
    pid: Write | None = None  # to record at the next tick (ls/show only)
    progress: tuple[str, int, float, str | None] | None = None  # likewise, grouped per tick
    # Cancel and kill requests from other processes (by seq) that the terminal write answers.
    end_requests: list[int] = field(default_factory=list)
    suspended: bool = False
    # Came from the ledger (a client's submit, a resume), not from this facade:
    # its notice is read from the ledger, so its record need not wait for it.
    adopted: bool = False
