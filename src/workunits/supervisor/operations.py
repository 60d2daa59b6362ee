"""How ``Supervisor``'s verbs reach its actor: each operation as the ask that carries it out.

The verbs (``workunits._surface``) hand ``Supervisor`` an operation or a
submission; ``ask_for`` and ``register`` turn it into the typed request the
SupervisorActor answers (``supervisor.actor.requests``), and say how the
answer becomes the verb's. One translation for the blocking call and its
``_async`` twin, which differ only in how they wait for the answer. Runs in
the caller's thread (a submission's spec on a worker thread, for the twins).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from workunits._core.errors import SpecError
from workunits._core.status import Reason
from workunits._ray.actor import RemoteSpec
from workunits._ray.runtime import check_available
from workunits._ray.teammate_actor import RemoteTeammateSpec
from workunits._surface import ops
from workunits._surface.submission import Built, Submission, build, built, teammate_restart
from workunits._wire.frames import encode_message
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor import tracing

R = TypeVar("R")


def _same(answer: Any) -> Any:
    return answer


def ask_for(op: ops.Op[R]) -> tuple[rq.Request[Any], Callable[[Any], R]]:  # noqa: PLR0912 - a case each
    """The request that carries ``op`` out, and how its answer becomes ``op``'s."""
    request: rq.Request[Any]
    answer: Callable[[Any], Any] = _same
    match op:
        case ops.Get(work_id):
            request = rq.Get(work_id)
        case ops.List(q):
            request = rq.ListUnits(q)
        case ops.Kill(work_id):
            request = rq.KillUnit(work_id, Reason.KILLED)
        case ops.Cancel(work_id, grace):
            request = rq.CancelUnit(work_id, grace)
        case ops.Retry(work_id):
            request = rq.RetryUnit(work_id)
            answer = _submitted
        case ops.Signal(work_id, name, value):
            request = rq.SignalUnit(work_id, name, value)
        case ops.SendInput(work_id, data, eof):
            request = rq.SendInput(work_id, data, eof)
        case ops.ReadOutput(work_id, max_bytes):
            request = rq.ReadOutput(work_id, max_bytes)
            answer = _data
        case ops.ReadChunk(work_id, offset, max_bytes):
            request = rq.ReadChunk(work_id, offset, max_bytes)
        case ops.Lease(work_id, lease):
            request = rq.TakeLease(work_id, lease)
        case ops.RenewLease(_, lease_id, lease):
            request = rq.RenewLease(lease_id, lease)
        case ops.EndLease(work_id, lease_id):
            request = rq.EndLease(work_id, lease_id)
        case ops.AddSchedule(name, cron, letter, spec, tz, catch_up, options):
            request = rq.AddSchedule(name, cron, letter, spec, tz, catch_up, dict(options))
        case ops.RemoveSchedule(name):
            request = rq.RemoveSchedule(name)
        case ops.ListSchedules():
            request = rq.ListSchedules()
        case ops.Tell(work_id, message):
            request = rq.SendToTeammate(work_id, encode_message(message), ask=False)
            answer = _nothing
        case ops.Stop(work_id):
            request = rq.StopTeammateUnit(work_id)
        case ops.Shed(n):
            request = rq.Shed(n)
        case ops.Gc(older_than):
            request = rq.Gc(older_than)
        case ops.RegisterKind(letter, actor_class):
            request = rq.RegisterKind(letter, actor_class)
        case _:
            raise SpecError(f"a supervisor has no {type(op).__name__} operation")
    return request, cast("Callable[[Any], R]", answer)


def _submitted(registered: Any) -> ops.Submitted:
    return ops.Submitted(registered.record.id, registered.created)


def _data(read: tuple[bytes, Any]) -> bytes:
    return read[0]


def _nothing(_: Any) -> None:
    return None


def register(submission: Submission) -> rq.Register:
    """The submit ``submission`` asks for: its spec built and checked here (may import).

    Besides the kinds every surface builds (``_surface.submission.build``), a
    supervisor starts Ray units: ``remote`` and ``teammate(remote=True)``.
    """
    made = _built(submission)
    return rq.Register(
        made.letter,
        made.spec,
        made.options,
        restart=made.restart,
        trace=tracing.submitter_context(),  # the submitter's span, read in its thread
    )


def _built(sub: Submission) -> Built:
    if sub.verb == "remote":
        check_available()
        spec = RemoteSpec.build(
            sub.target, sub.args, dict(sub.kwargs), resources=sub.spec["resources"]
        )
        return built(sub, "r", spec, spec.name)
    if sub.verb == "teammate" and sub.spec["remote"]:
        teammate_restart(sub)  # refuses a restart policy for a Ray teammate
        if sub.spec["memory_limit"] is not None:
            raise SpecError(
                'memory_limit is for local teammates; on Ray ask for resources={"memory": n}'
            )
        check_available()
        mate = RemoteTeammateSpec.for_class(
            sub.target, sub.args, dict(sub.kwargs), resources=sub.spec["resources"]
        )
        return built(sub, "t", mate, mate.name)
    return build(sub)
