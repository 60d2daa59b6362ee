"""``Deadlines``: the queue of (when, unit, what) the ticks drain (timeouts, escalations,
evictions). Owned by the SupervisorActor; runs in its thread. Whether a unit may be
evicted when its entry comes due is ``eviction``'s rule, decided there."""

from __future__ import annotations

import enum
import heapq
import itertools


class Due(enum.Enum):
    TIMEOUT = "timeout"  # the unit's own time limit
    ESCALATE = "escalate"  # a cancel's grace is over: SIGKILL
    EVICT = "evict"  # evict_after has passed: try to drop the record


# (when, seq, work ID, what): a plain tuple, compared in C by when then seq (seq is
# unique, so the rest is never compared); a dataclass's order took a Python call
# per comparison, a few for every unit's eviction deadline.
_Entry = tuple[float, int, str, Due]


class Deadlines:
    """A min-heap of (when, unit, what). Entries may be stale; the consumer re-checks."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, when: float, work_id: str, what: Due) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), work_id, what))

    def pop_due(self, now: float) -> list[tuple[str, Due]]:
        due: list[tuple[str, Due]] = []
        while self._heap and self._heap[0][0] <= now:
            _, _, work_id, what = heapq.heappop(self._heap)
            due.append((work_id, what))
        return due
