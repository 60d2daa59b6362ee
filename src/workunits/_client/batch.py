"""A client's batch: ``Client.submit_many`` and ``Client.map`` (issue 41).

Runs in the caller's thread. Every call is checked and made into its ledger
row here (an item that cannot be fails the batch, named by its index, before
anything is written); then all rows are written in one fully synced
transaction (``Units.submit_many``), which wakes the supervisor once. It
starts them at its next tick, under its kinds' ``concurrency``: a batch
limit (``max_workers``) is the supervisor's, in memory, and a client's batch
has none of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workunits._core.errors import BatchItemsFailed, ClientClosed, WorkunitsError, WrongType
from workunits._core.retry import Retry
from workunits._core.seconds import wait_timeout
from workunits._ledger import NewUnit
from workunits._wire.agent_call import AgentCall
from workunits._wire.specs import DEFAULT_OUTPUT_CAP

if TYPE_CHECKING:
    from workunits._client.ledger_client import Client, ClientHandle


@dataclass(frozen=True, slots=True)
class Shared:
    """The options every unit of a client's batch shares."""

    max_attempts: int | None = None
    memory_limit: int | None = None
    output_cap: int = DEFAULT_OUTPUT_CAP
    retry: Retry | None = None


def _item_error(index: int, exc: WorkunitsError) -> WorkunitsError:
    text = f"item {index} of the batch: {exc}"
    try:
        return type(exc)(text)
    except Exception:  # noqa: BLE001 - a type with its own arguments: keep it, add a note
        exc.add_note(text)
        return exc


def submit_many(client: Client, calls: Iterable[AgentCall], shared: Shared) -> list[ClientHandle]:
    from workunits._client.ledger_client import ClientHandle  # noqa: PLC0415 - a cycle otherwise

    news: list[NewUnit] = []
    for index, call in enumerate(calls):
        try:
            if not isinstance(call, AgentCall):
                raise WrongType(
                    f"submit_many takes wu.AgentCall items, got {type(call).__name__}: "
                    f"wrap it as wu.AgentCall(fn, args, kwargs)"
                )
            durable, name = client._call_durable(
                call.fn,
                call.args,
                dict(call.kwargs),
                timeout=call.timeout,
                memory_limit=shared.memory_limit,
                output_cap=shared.output_cap,
            )
            news.append(
                client._new_unit(
                    "a",
                    "agent",
                    durable,
                    name if call.description is None else call.description,
                    key=call.key,
                    max_attempts=shared.max_attempts,
                    retry=shared.retry,
                )
            )
        except WorkunitsError as exc:
            raise _item_error(index, exc) from exc
    answers = client.ledger.units.submit_many(news, wake=True)
    results: list[ClientHandle | BaseException] = [
        a if isinstance(a, BaseException) else ClientHandle(client, a[0].id, created=a[1])
        for a in answers
    ]
    if any(isinstance(r, BaseException) for r in results):
        raise BatchItemsFailed(results)
    return [r for r in results if not isinstance(r, BaseException)]


def map_calls(
    client: Client,
    fn: Callable[..., Any] | str,
    iterables: tuple[Iterable[Any], ...],
    timeout: float | None,
) -> Generator[Any, None, None]:
    timeout = wait_timeout(timeout)
    end = None if timeout is None else time.monotonic() + timeout
    calls = [AgentCall(fn, tuple(args)) for args in zip(*iterables, strict=False)]
    return _results(client, submit_many(client, calls, Shared()), end)


def _results(
    client: Client, handles: list[ClientHandle], end: float | None
) -> Generator[Any, None, None]:
    done = 0
    try:
        for handle in handles:
            left = None if end is None else max(0.0, end - time.monotonic())
            value = client.result(handle.id, timeout=left)
            done += 1
            yield value
    finally:
        for handle in handles[done:]:  # abandoned: their units end, started or not
            try:
                client.kill(handle.id)
            except ClientClosed:
                return
