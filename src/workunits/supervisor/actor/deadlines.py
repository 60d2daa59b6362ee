"""``Deadlines``: the queue of (when, unit, what) the ticks drain (timeouts, escalations,
evictions). Owned by the SupervisorActor; runs in its thread. Whether a unit may be
evicted when its entry comes due is ``eviction``'s rule, decided there."""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass, field


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
