"""``Delays``: pending units that may not start yet (``not_before``).

Owned by ``Starts``; runs in the SupervisorActor's thread. A delayed unit is
registered like any other (ledger row, registry record, ``pending``), so it
can be read, listed and cancelled; it only waits here instead of in a kind's
queue. Its ``not_before`` is in the ledger, so a restarted supervisor adopts
it as pending and holds it here again: the delay outlives a SIGKILL.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Delays(Generic[T]):
    def __init__(self) -> None:
        # Invariant: a heap of (due, seq, item); seq keeps equal times in arrival order.
        self._heap: list[tuple[float, int, T]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def hold(self, due: float, item: T) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, item))

    def release_due(self, now: float, start: Callable[[T], None]) -> None:
        """Hand every item due by ``now`` to ``start``, earliest first."""
        while self._heap and self._heap[0][0] <= now:
            _, _, item = heapq.heappop(self._heap)
            start(item)
