"""A batch of agent calls (``submit_many``, ``map``), made into submissions once for every
surface.

Each surface's ``submit_many`` turns its ``wu.AgentCall`` items into
``Submission``s here -- the options every item shares, then each item's own
key, description and timeout -- and carries the batch out over its own
transport: one ``SubmitMany`` ask of the supervisor's actor, one ledger
transaction, one ``POST /v1/units:batch``, one spawn request. Every item is
checked before anything is written; an item that cannot make a unit fails the
whole batch, named by its index (``each_item``). ``results`` is ``map``'s
reading of the units' values, in order, as ``Executor.map`` reads its futures.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterable, Sequence
from typing import Any, TypeVar

from workunits._core.errors import (
    BatchItemsFailed,
    ClientClosed,
    SpecError,
    WorkunitsError,
    WrongType,
)
from workunits._core.retry import Retry
from workunits._core.sandbox import Sandbox
from workunits._core.seconds import wait_timeout
from workunits._surface.options import taken_by
from workunits._surface.submission import Submission
from workunits._wire.agent_call import AgentCall
from workunits._wire.specs import DEFAULT_OUTPUT_CAP

T = TypeVar("T")
H = TypeVar("H")


def submissions(
    calls: Iterable[AgentCall],
    *,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    memory_limit: int | None = None,
    reuse: bool = False,
    max_attempts: int | None = None,
    retry: Retry | None = None,
    sandbox: Sandbox | None = None,
) -> list[Submission]:
    """One agent submission per call: the shared options, then the call's own."""
    # Here, not at the top: the generated verbs (``submit_many``) import this module.
    from workunits._surface._generated import UnitOptions  # noqa: PLC0415

    spec: dict[str, Any] = {o.name: o.default for o in taken_by("agent") if not o.unit}
    spec.update(output_cap=output_cap, memory_limit=memory_limit, reuse=reuse)
    out: list[Submission] = []
    for index, call in enumerate(calls):
        if not isinstance(call, AgentCall):
            raise item_error(
                index,
                WrongType(
                    f"submit_many takes wu.AgentCall items, got {type(call).__name__}: "
                    f"wrap it as wu.AgentCall(fn, args, kwargs)"
                ),
            )
        unit = UnitOptions(
            description=call.description,
            key=call.key,
            timeout=call.timeout,
            max_attempts=max_attempts,
            retry=retry,
            sandbox=sandbox,
        )
        out.append(Submission("agent", call.fn, call.args, call.kwargs, spec, unit))
    return out


def check_max_workers(max_workers: object) -> None:
    """SpecError (a ValueError) unless ``max_workers`` is an int > 0 (the stdlib's words)."""
    if isinstance(max_workers, bool) or not isinstance(max_workers, int):
        raise SpecError(f"max_workers must be an int, got {max_workers!r}")
    if max_workers <= 0:
        raise SpecError("max_workers must be greater than 0")


def calls_of(fn: Callable[..., Any] | str, iterables: Sequence[Iterable[Any]]) -> list[AgentCall]:
    """``map``'s calls: ``fn`` over the zipped items, as ``Executor.map`` zips them."""
    return [AgentCall(fn, tuple(args)) for args in zip(*iterables, strict=False)]


def each_item(items: Sequence[T], make: Callable[[T], H]) -> list[H]:
    """``make`` of each item, in order; an item's error names its index in the batch."""
    out: list[H] = []
    for index, item in enumerate(items):
        try:
            out.append(make(item))
        except WorkunitsError as exc:
            raise item_error(index, exc) from exc
    return out


def item_error(index: int, exc: WorkunitsError) -> WorkunitsError:
    """``exc`` (of the same type where it can be rebuilt) naming the batch item it is about."""
    text = f"item {index} of the batch: {exc}"
    try:
        named = type(exc)(text)
    except Exception:  # noqa: BLE001 - a type with its own arguments: keep it, add a note
        exc.add_note(text)
        return exc
    return named


def handles_or_raise(results: Sequence[H | BaseException]) -> list[H]:
    """Every item's handle; ``BatchItemsFailed`` (carrying all of them) if one failed."""
    if any(isinstance(r, BaseException) for r in results):
        raise BatchItemsFailed(list(results))
    return [r for r in results if not isinstance(r, BaseException)]


def deadline(timeout: float | None) -> float | None:
    """When ``map``'s ``timeout`` runs out (``time.monotonic``): it counts from the call."""
    timeout = wait_timeout(timeout)
    return None if timeout is None else time.monotonic() + timeout


def results(
    ids: Sequence[str],
    end: float | None,
    result: Callable[[str, float | None], Any],
    kill: Callable[[str], object],
) -> Generator[Any, None, None]:
    """The units' values in order, as ``Executor.map``: a failure raised at its place,
    NotFinished once ``end`` (``deadline``) has passed; leaving early kills the rest."""
    done = 0
    try:
        for work_id in ids:
            left = None if end is None else max(0.0, end - time.monotonic())
            value = result(work_id, left)
            done += 1
            yield value
    finally:
        for work_id in ids[done:]:  # abandoned: their units end, started or not
            try:
                kill(work_id)
            except ClientClosed:
                return


async def results_async(
    ids: Sequence[str],
    end: float | None,
    result: Callable[[str, float | None], Awaitable[Any]],
    kill: Callable[[str], Awaitable[object]],
) -> AsyncGenerator[Any, None]:
    """``results`` for ``async for``: no thread waits for a unit."""
    done = 0
    try:
        for work_id in ids:
            left = None if end is None else max(0.0, end - time.monotonic())
            value = await result(work_id, left)
            done += 1
            yield value
    finally:
        for work_id in ids[done:]:
            with contextlib.suppress(ClientClosed):
                await kill(work_id)
