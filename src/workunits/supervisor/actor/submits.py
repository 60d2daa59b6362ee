"""Group commit of submits: the facade's submits that arrive together share one synced commit.

Owned by the SupervisorActor; every method runs in its thread. As with ends
(``supervisor.actor.endings``), the fsync of a commit is the supervisor thread's
largest cost per submit; callers submitting at once (8 threads, an event
loop's tasks) need not pay one each.

A ``Register`` ask is validated and its row built at once (``Starts.prepare``):
a bad argument is raised to its caller as before. Its answer is then deferred
(``Request.defer``) and it joins the group, which is committed, in order:

- at once when nothing else waits in the actor's inbox -- a lone caller pays
  no extra hop, and the last of a run of submits commits the run;
- when the group reaches ``MAX_SUBMITS_PER_COMMIT``;
- at the ``FlushSubmits`` the group's first submit tells the actor;
- before any other message is handled (``SupervisorActor.on_receive``).

Durability (DESIGN §6) is kept: the group's rows commit in one fully synced
transaction (``Starts.enter``), and only then is any of its units put in
memory or started, or any caller answered. A submit's own error (its key
taken with other arguments, text the ledger refuses) fails that caller
alone; a failed commit (a full disk) fails every submit of the group with
the ledger's error, and nothing of it is in memory or started. At stop, a
group not yet committed is dropped and its callers told the supervisor is
closed: nothing of it was written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workunits._core.errors import SupervisorClosed, WorkunitsError, copy_to_raise
from workunits._core.record import WorkRecord
from workunits._surface import batch
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.starts import Prepared, Starts

if TYPE_CHECKING:
    from workunits.supervisor.actor.tracing import UnitSpans

log = logging.getLogger(__name__)

MAX_SUBMITS_PER_COMMIT = 256  # a longer run of submits is committed in several groups


@dataclass(frozen=True, slots=True)
class FlushSubmits:
    """Told by the supervisor to itself at the first submit of a group: commit the group."""


class GroupedSubmits:
    def __init__(
        self,
        starts: Starts,
        *,
        idle: Callable[[], bool],
        tell_self: Callable[[object], None],
    ) -> None:
        self._starts = starts
        self._idle = idle  # nothing waits in the actor's inbox
        self._tell_self = tell_self
        # Submits validated, answers deferred, rows not yet written (in arrival order).
        # Invariant: non-empty only while a FlushSubmits is in the inbox.
        self.spans: UnitSpans | None = None  # traces, when asked for (supervisor.tracing)
        self._group: list[tuple[rq.Register, Prepared]] = []
        self._flush_queued = False

    @property
    def pending(self) -> bool:
        """Submits wait for their commit: commit before anything else is handled."""
        return bool(self._group)

    def add(self, request: rq.Register) -> None:
        """A ``Register`` ask: validate it (errors go to its caller now), then join the group."""
        kind_taken = sum(1 for _, p in self._group if p.starts_now)
        batch_taken = 0
        if request.batch is not None:
            token = request.batch.token
            batch_taken = sum(
                1 for _, p in self._group if p.starts_now and p.batch and p.batch.token == token
            )
        prepared = self._starts.prepare(
            request.letter,
            request.spec,
            request.options,
            restart=request.restart,
            reserved=kind_taken,
            batch=request.batch,
            batch_reserved=batch_taken,
        )
        if self.spans is not None:
            self.spans.given(prepared.record.id, request.trace)
        request.defer()
        self._group.append((request, prepared))
        if self._idle() or len(self._group) >= MAX_SUBMITS_PER_COMMIT:
            self.commit()
        elif not self._flush_queued:
            self._flush_queued = True
            self._tell_self(FlushSubmits())

    def submit_many(self, request: rq.SubmitMany) -> list[WorkRecord | BaseException]:
        """A batch: check every item, then one synced commit for all (``Starts.enter``).

        The group waiting for its commit goes first, so submits keep their order.
        An item that does not pass its checks fails the batch, named by its
        index, before anything is written or started.
        """
        self.commit()
        prepared: list[Prepared] = []
        taken = 0  # items that start at once: they take slots of their kind and batch
        for index, item in enumerate(request.items):
            try:
                p = self._starts.prepare(
                    item.letter,
                    item.spec,
                    item.options,
                    restart=item.restart,
                    reserved=taken,
                    batch=request.batch,
                    batch_reserved=taken,
                )
            except WorkunitsError as exc:
                raise batch.item_error(index, exc) from exc
            taken += p.starts_now
            prepared.append(p)
        if self.spans is not None:
            for item, p in zip(request.items, prepared, strict=True):
                self.spans.given(p.record.id, item.trace)
        return [
            r if isinstance(r, BaseException) else r.record for r in self._starts.enter(prepared)
        ]

    def flush(self) -> None:
        """The FlushSubmits told at the group's first submit has come round."""
        self._flush_queued = False
        self.commit()

    def commit(self) -> None:
        """Write the group's rows (one synced commit), admit its units, answer its callers."""
        if not self._group:
            return
        group, self._group = self._group, []
        try:
            entered = self._starts.enter([p for _, p in group])
        except Exception as exc:  # noqa: BLE001 - the commit failed: every caller hears why
            for request, _ in group:
                request.fail(copy_to_raise(exc))  # each caller raises its own
                request.settle()
            return
        for (request, _), outcome in zip(group, entered, strict=True):
            if isinstance(outcome, BaseException):
                request.fail(outcome)
            else:
                request.answer(outcome)
            request.settle()

    def drop(self) -> None:
        """At stop: nothing of the group was written; its callers hear the supervisor closed."""
        group, self._group = self._group, []
        for request, _ in group:
            request.fail(SupervisorClosed("the supervisor closed before this submit was written"))
            request.settle()
