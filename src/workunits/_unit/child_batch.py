"""Children as one batch: ``ctx.submit_many`` and ``ctx.map`` (issue 41).

Runs in the unit's process, in the thread that calls. Every call is pickled
here (``AgentSpec.build``), so an item that cannot make a unit fails the batch,
named by its index, before anything is sent; the rest goes to the supervisor
as one ``SpawnMany`` request over the unit's channel, written in one ledger
transaction, as ``Supervisor.submit_many`` does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

from workunits._core.errors import (
    BatchItemsFailed,
    SpecError,
    SupervisorClosed,
    WorkunitsError,
    WrongType,
)
from workunits._core.seconds import wait_timeout
from workunits._unit import tracing
from workunits._wire import frames as m
from workunits._wire.agent_call import AgentCall
from workunits._wire.specs import AgentSpec

if TYPE_CHECKING:
    from workunits._unit.context import ChildHandle, UnitContext


def parallelism() -> int:
    """The processors this process may use: ``ctx.map``'s default ``max_workers``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_max_workers(max_workers: object) -> None:
    if isinstance(max_workers, bool) or not isinstance(max_workers, int):
        raise SpecError(f"max_workers must be an int, got {max_workers!r}")
    if max_workers <= 0:
        raise SpecError("max_workers must be greater than 0")


def _item_error(index: int, exc: WorkunitsError) -> WorkunitsError:
    text = f"item {index} of the batch: {exc}"
    try:
        return type(exc)(text)
    except Exception:  # noqa: BLE001 - a type with its own arguments: keep it, add a note
        exc.add_note(text)
        return exc


def spawn_many(
    ctx: UnitContext, calls: Iterable[AgentCall], max_workers: int | None
) -> list[ChildHandle]:
    """Start the calls as child agents in one batch; their handles, in order."""
    from workunits._unit.context import ChildHandle, plain_data  # noqa: PLC0415 - a cycle otherwise

    if max_workers is not None:
        check_max_workers(max_workers)
    items: list[m.Spawn] = []
    trace = tracing.current_traceparent()  # each child's span's parent (supervisor.tracing)
    for index, call in enumerate(calls):
        try:
            if not isinstance(call, AgentCall):
                raise WrongType(
                    f"submit_many takes wu.AgentCall items, got {type(call).__name__}: "
                    f"wrap it as wu.AgentCall(fn, args, kwargs)"
                )
            if call.key is not None and (not isinstance(call.key, str) or not call.key):
                raise SpecError(f"key must be a non-empty str, got {call.key!r}")
            spec = AgentSpec.build(call.fn, call.args, dict(call.kwargs))
        except WorkunitsError as exc:
            raise _item_error(index, exc) from exc
        name = spec.name if call.description is None else call.description
        # As data the supervisor's restricted reader loads: no code (``plain_data``).
        items.append(m.Spawn(0, "a", plain_data(spec), name, call.timeout, call.key, trace=trace))
    ctx._raise_if_cancelled()
    answers = ctx._request(lambda req: m.SpawnMany(req, tuple(items), max_workers))
    results: list[ChildHandle | BaseException] = [
        ChildHandle(ctx, value) if ok else WorkunitsError(value) for ok, value in answers
    ]
    for result in results:
        if isinstance(result, ChildHandle):
            ctx._transcript.write("child", child=result.id, status="started", kind="a")
    if any(isinstance(r, BaseException) for r in results):
        raise BatchItemsFailed(results)
    return [r for r in results if not isinstance(r, BaseException)]


def map_children(
    ctx: UnitContext,
    fn: Callable[..., Any],
    iterables: tuple[Iterable[Any], ...],
    timeout: float | None,
    max_workers: int | None,
) -> Generator[Any, None, None]:
    """``fn`` over the zipped items as child agents, one batch; results in order."""
    timeout = wait_timeout(timeout)
    end = None if timeout is None else time.monotonic() + timeout
    calls = [AgentCall(fn, tuple(args)) for args in zip(*iterables, strict=False)]
    children = spawn_many(ctx, calls, parallelism() if max_workers is None else max_workers)
    return _results(ctx, children, end)


def _results(
    ctx: UnitContext, children: list[ChildHandle], end: float | None
) -> Generator[Any, None, None]:
    done = 0
    try:
        for child in children:
            left = None if end is None else max(0.0, end - time.monotonic())
            value = ctx.result(child, timeout=left)
            done += 1
            yield value
    finally:
        for child in children[done:]:  # abandoned: their units end, started or not
            try:
                ctx.kill(child)
            except SupervisorClosed:
                return
