"""Eviction rules (DESIGN invariant 8) and the deadline queue the ticks drain."""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass, field

from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal


def evictable(record: WorkRecord, now: float, *, gated: bool) -> bool:
    """Whether a record may leave memory (invariant 8), leases aside.

    Only when it is terminal, past ``evict_after``, held by no reader of this
    process, and -- when ``gated`` (its notice is for a consumer that may still
    come for it: the application, or a parent in memory) -- acknowledged. The
    caller then asks the ledger whether a retain lease still holds it.
    """
    return (
        is_terminal(record.status)
        and record.notified
        and (record.acknowledged or not gated)
        and record.retain == 0
        and record.evict_after is not None
        and record.evict_after <= now
    )


class Due(enum.Enum):
    TIMEOUT = "timeout"  # the unit's own time limit
    ESCALATE = "escalate"  # a cancel's grace is over: SIGKILL
    EVICT = "evict"  # evict_after has passed: try to drop the record


@dataclass(order=True, frozen=True, slots=True)
class _Entry:
    when: float
    seq: int
    work_id: str = field(compare=False)
    what: Due = field(compare=False)


class Deadlines:
    """A min-heap of (when, unit, what). Entries may be stale; the consumer re-checks."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, when: float, work_id: str, what: Due) -> None:
        heapq.heappush(self._heap, _Entry(when, next(self._seq), work_id, what))

    def pop_due(self, now: float) -> list[tuple[str, Due]]:
        due: list[tuple[str, Due]] = []
        while self._heap and self._heap[0].when <= now:
            entry = heapq.heappop(self._heap)
            due.append((entry.work_id, entry.what))
        return due
