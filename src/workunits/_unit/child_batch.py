"""Children as one batch: ``ctx.submit_many`` and ``ctx.map`` (``_surface.batch``).

Runs in the unit's process, in the thread that calls. Every call is pickled
here (``submission.build``), so an item that cannot make a unit fails the
batch, named by its index, before anything is sent; the rest goes to the
supervisor as one ``SpawnMany`` request over the unit's channel, written in one
ledger transaction, as ``Supervisor.submit_many`` does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from workunits._core.errors import WorkunitsError
from workunits._surface import batch
from workunits._surface.submission import Submission, build
from workunits._unit import tracing
from workunits._wire import frames as m

if TYPE_CHECKING:
    from workunits._unit.child_handles import ChildHandle
    from workunits._unit.context import UnitContext


def parallelism() -> int:
    """The processors this process may use: ``ctx.map``'s default ``max_workers``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def spawn_many(
    ctx: UnitContext, submissions: list[Submission], max_workers: int | None
) -> list[ChildHandle | BaseException]:
    """Start the submissions as child agents in one batch: per item its handle, or the
    error that item alone met."""
    from workunits._unit.child_handles import ChildHandle  # noqa: PLC0415 - a cycle otherwise

    if max_workers is not None:
        batch.check_max_workers(max_workers)
    trace = tracing.current_traceparent()  # each child's span's parent (supervisor.tracing)
    items = batch.each_item(submissions, lambda sub: ctx._spawn_frame(build(sub), trace))
    ctx._raise_if_cancelled()
    answers = ctx._request(lambda req: m.SpawnMany(req, tuple(items), max_workers))
    results: list[ChildHandle | BaseException] = [
        ChildHandle(ctx, value) if ok else WorkunitsError(value) for ok, value in answers
    ]
    for result in results:
        if isinstance(result, ChildHandle):
            ctx._transcript.write("child", child=result.id, status="started", kind="a")
    return results
