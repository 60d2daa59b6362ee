"""How many units of one batch run at once: the batch's own limit, beside its kind's.

Owned by ``Starts``; every method runs in the supervisor actor's thread.

A batch (``Supervisor.map``, ``submit_many``, an executor) is written in one
transaction, every unit ``pending`` with its ID; at most ``limit`` of them run
at once (``BatchLimit``, named by a token the submitter chose, so one executor's
submits over its lifetime share one limit). The rest wait here, in submit order,
and start as the batch's running units end -- a kill of one that waits ends it
``killed`` without running, as for any pending unit.

Invariant: a unit holds a place in its batch (``_holding``) from the moment the
batch lets it go (to start, or to its kind's queue) until its end; ``running``
is the count of those places. A unit that waits holds none.

The limit lives in memory: a unit of a batch that a later session adopts from
the ledger starts under its kind's limit only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Q = TypeVar("Q")


@dataclass(frozen=True, slots=True)
class BatchLimit:
    """Sent with a submit: which batch the unit belongs to and how many of it run at once."""

    token: str
    limit: int


@dataclass(slots=True, eq=False)
class _Batch(Generic[Q]):
    token: str
    limit: int
    running: int = 0
    waiting: deque[tuple[str, Q]] = field(default_factory=deque)


class Batches(Generic[Q]):
    """The batches with units in memory; ``Q`` is what ``Starts`` keeps to start a unit."""

    def __init__(self) -> None:
        self._batches: dict[str, _Batch[Q]] = {}
        self._holding: dict[str, _Batch[Q]] = {}  # work ID -> the batch it holds a place in

    def _batch(self, limit: BatchLimit) -> _Batch[Q]:
        batch = self._batches.get(limit.token)
        if batch is None:
            batch = self._batches[limit.token] = _Batch(limit.token, limit.limit)
        return batch

    def has_room(self, limit: BatchLimit, reserved: int = 0) -> bool:
        """A unit of this batch may start now; ``reserved``: places taken by units
        prepared before it in the same commit (not yet admitted)."""
        batch = self._batches.get(limit.token)
        if batch is None:
            return reserved < limit.limit
        return not batch.waiting and batch.running + reserved < batch.limit

    def admit(self, work_id: str, limit: BatchLimit, queued: Q, *, forced: bool = False) -> bool:
        """A unit of the batch entered memory: True when it may go on (it holds a place),
        False when it waits here. ``forced``: its row says it runs already."""
        batch = self._batch(limit)
        if forced or (not batch.waiting and batch.running < batch.limit):
            batch.running += 1
            self._holding[work_id] = batch
            return True
        batch.waiting.append((work_id, queued))
        return False

    def ended(self, work_id: str, go: Callable[[str, Q], bool]) -> None:
        """A unit ended: give its place to the next waiting unit of its batch.

        ``go(work_id, queued)`` starts (or queues for its kind) a waiting unit and
        says whether it did -- False for one that ended while it waited.
        """
        batch = self._holding.pop(work_id, None)
        if batch is None:
            return
        batch.running -= 1
        while batch.waiting and batch.running < batch.limit:
            waiting_id, queued = batch.waiting.popleft()
            batch.running += 1
            self._holding[waiting_id] = batch
            if not go(waiting_id, queued):
                batch.running -= 1
                del self._holding[waiting_id]
        if not batch.running and not batch.waiting:
            del self._batches[batch.token]
