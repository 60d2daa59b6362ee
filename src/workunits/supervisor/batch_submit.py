"""A batch of agent calls made into one ``SubmitMany`` request (``Supervisor.submit_many``,
``map``, the executors).

Runs in the caller's thread: each call is pickled here (``AgentSpec.build``), so
an item that cannot make a unit fails the whole batch, named by its index,
before anything reaches the supervisor -- nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workunits._core.errors import WorkunitsError, WrongType
from workunits._core.retry import Retry
from workunits._wire.agent_call import AgentCall
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, AgentSpec
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor import tracing
from workunits.supervisor.actor.batches import BatchLimit
from workunits.supervisor.actor.submits import batch_item_error


@dataclass(frozen=True, slots=True)
class Shared:
    """The options every unit of a batch shares."""

    reuse: bool = False
    memory_limit: int | None = None
    output_cap: int = DEFAULT_OUTPUT_CAP
    max_attempts: int | None = None
    retry: Retry | None = None
    parent: str | None = None


def request(calls: Iterable[AgentCall], shared: Shared, batch: BatchLimit | None) -> rq.SubmitMany:
    """The ``SubmitMany`` for ``calls``; SpecError (naming the item) for one that cannot be."""
    trace = tracing.submitter_context()
    items: list[rq.Register] = []
    for index, call in enumerate(calls):
        try:
            if not isinstance(call, AgentCall):
                raise WrongType(
                    f"submit_many takes wu.AgentCall items, got {type(call).__name__}: "
                    f"wrap it as wu.AgentCall(fn, args, kwargs)"
                )
            spec = AgentSpec.build(
                call.fn,
                call.args,
                dict(call.kwargs),
                memory_limit=shared.memory_limit,
                output_cap=shared.output_cap,
                reuse=shared.reuse,
            )
        except WorkunitsError as exc:
            raise batch_item_error(index, exc) from exc
        items.append(
            rq.Register(
                "a",
                spec,
                shared.parent,
                spec.name if call.description is None else call.description,
                call.timeout,
                call.key,
                shared.max_attempts,
                shared.retry,
                trace=trace,
            )
        )
    return rq.SubmitMany(tuple(items), batch)
