"""How the caller's side asks the SupervisorActor for a batch: one ``SubmitMany`` for a
``submit_many``, a ``map``, an executor's ``submit``/``map`` (``supervisor.executor``),
and what an executor asks besides (withdrawing units not yet started, a callback at a
unit's end).

Runs in the caller's thread (a batch's specs on a worker thread, for the twins):
each submission's spec is built here (``operations.register``: it may import and
pickle), so an item that cannot be fails the batch, named by its index, before
anything is written.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workunits._core.errors import SupervisorClosed
from workunits._core.record import WorkRecord
from workunits._core.sandbox import Sandbox
from workunits._surface import batch
from workunits._surface.submission import Submission
from workunits._wire.agent_call import AgentCall
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.batches import BatchLimit
from workunits.supervisor.operations import register
from workunits.supervisor.waiters import settled

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor

Call = tuple[Callable[..., Any] | str, tuple[Any, ...], dict[str, Any]]


def limit_of(max_workers: int | None) -> BatchLimit | None:
    """A batch's own limit of units running at once (None: none of its own)."""
    if max_workers is None:
        return None
    batch.check_max_workers(max_workers)
    return BatchLimit(secrets.token_hex(8), max_workers)


def request(submissions: list[Submission], limit: BatchLimit | None) -> rq.SubmitMany:
    """The ``SubmitMany`` of ``submissions``, every spec built and checked."""
    return rq.SubmitMany(tuple(batch.each_item(submissions, register)), limit)


async def records_async(
    sup: Supervisor, submissions: list[Submission], max_workers: int | None
) -> list[WorkRecord | BaseException]:
    """Submissions of any kinds as one batch, each built on a worker thread (pickling
    may import); per item its record or its own error (the HTTP API's batch too)."""
    limit = limit_of(max_workers)
    built = await asyncio.to_thread(request, submissions, limit)
    return await sup._ask_async(built)


def submit_calls(
    sup: Supervisor,
    calls: list[Call],
    *,
    reuse: bool,
    limit: BatchLimit,
    sandbox: Sandbox | None = None,
) -> list[WorkRecord]:
    """An executor's submits as one batch; the first item's own error raised (an
    executor's items have no keys: none is expected)."""
    items = [AgentCall(fn, args, kwargs) for fn, args, kwargs in calls]
    submissions = batch.submissions(items, reuse=reuse, sandbox=sandbox)
    answers = sup._ask(request(submissions, limit))
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    return [a for a in answers if not isinstance(a, BaseException)]


def withdraw_pending(sup: Supervisor, work_ids: tuple[str, ...]) -> list[bool]:
    """End the units not yet started ``killed`` (cancelled); per unit, whether it was."""
    return sup._ask(rq.WithdrawPending(work_ids))


def on_end(sup: Supervisor, work_id: str, callback: Callable[[WorkRecord | None], None]) -> None:
    """Call ``callback(record)`` once the unit's end is durable (at once if it is), or
    ``callback(None)`` if the supervisor closes first. It runs in the supervisor
    actor's thread (or this one): it must only hand the record on."""
    waiter = sup._waiters.add(work_id, callback, lambda: callback(None))
    if waiter.unended and not sup._channel.closed:
        return  # its end is still to come, and will call back
    try:
        record = sup.get(work_id)
    except SupervisorClosed:
        sup._waiters.discard(work_id, waiter)
        callback(None)
        return
    if settled(record):
        sup._waiters.discard(work_id, waiter)
        callback(record)  # may also have been called by the end itself: resolved once
