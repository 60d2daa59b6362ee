"""``ChildRequests``: what a unit's process asks about its children -- spawn one, and kill /
cancel / stop / get one of its own descendants. Owned by the SupervisorActor; runs in its thread.

A descendant that has ended and left memory is answered from the ledger, as
the supervisor's own calls answer: ``get`` is its record, ``kill``, ``cancel``
and ``stop`` are False (it is not running). An error goes back to the unit as
the exception itself, so the unit catches it by its class (``wu.UnknownWork``),
as a caller of the supervisor does.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from workunits._core.errors import (
    LedgerGone,
    SandboxUnavailable,
    SpecError,
    UnknownWork,
    WorkunitsError,
)
from workunits._core.record import WorkRecord
from workunits._core.status import Reason
from workunits._wire import frames as m
from workunits._wire.actor_messages import ReplyRoute
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.batches import BatchLimit
from workunits.supervisor.actor.control import UnitControl
from workunits.supervisor.actor.messaging import reply_to_unit
from workunits.supervisor.actor.starts import Starts
from workunits.supervisor.actor.units import Units


class ChildRequests:
    def __init__(
        self,
        units: Units,
        starts: Starts,
        control: UnitControl,
        submit_many: Callable[[rq.SubmitMany], list[WorkRecord | BaseException]],
    ) -> None:
        self._units = units
        self._starts = starts
        self._control = control
        self._submit_many = submit_many  # GroupedSubmits.submit_many: a batch, one commit

    def spawn(
        self, parent: str, request: m.Spawn | m.SpawnMany, route: ReplyRoute | None = None
    ) -> None:
        if isinstance(request, m.SpawnMany):
            self._spawn_many(parent, request, route)
            return
        reply = self._replier(parent, request.req, route)
        try:
            record = self._starts.register(
                request.letter,
                request.spec,
                parent=parent,
                description=request.description,
                timeout=request.timeout,
                key=child_key(parent, request.key),
                retry=request.retry,
                stall_after=request.stall_after,
                not_before=request.not_before,
                sandbox=request.sandbox,
                trace=request.trace,
            )
        except (SpecError, SandboxUnavailable, LedgerGone) as exc:
            # Raised in the unit as they are here (plain errors: they pickle whole).
            reply(False, type(exc)(str(exc)))
        except WorkunitsError as exc:
            reply(False, exc)
        else:
            reply(True, record.id)

    def _spawn_many(
        self, parent: str, request: m.SpawnMany, route: ReplyRoute | None = None
    ) -> None:
        """Children as one batch: checked whole, one transaction; per item its ID or error."""
        reply = self._replier(parent, request.req, route)
        try:
            batch = None
            if request.max_workers is not None:
                batch = BatchLimit(secrets.token_hex(8), request.max_workers)
            items = tuple(
                rq.Register(
                    s.letter,
                    s.spec,
                    parent,
                    s.description,
                    s.timeout,
                    child_key(parent, s.key),
                    retry=s.retry,
                    stall_after=s.stall_after,
                    not_before=s.not_before,
                    sandbox=s.sandbox,
                    trace=s.trace,
                )
                for s in request.items
            )
            answers = self._submit_many(rq.SubmitMany(items, batch))
        except (SpecError, SandboxUnavailable, LedgerGone) as exc:
            reply(False, type(exc)(str(exc)))
            return
        except WorkunitsError as exc:
            reply(False, f"{type(exc).__name__}: {exc}")
            return
        value = [
            (False, f"{type(a).__name__}: {a}") if isinstance(a, BaseException) else (True, a.id)
            for a in answers
        ]
        reply(True, value)

    def control(self, parent: str, request: m.Control, route: ReplyRoute | None = None) -> None:
        """kill / cancel / stop / get for a unit's own descendants only; ``list`` its
        descendants (``workunits ls`` in the unit)."""
        reply = self._replier(parent, request.req, route)
        if request.op == "list":
            reply(True, [r for r in self._units.registry if self._descends_from(r, parent)])
            return
        try:
            target = self._units.get(request.target)  # memory, or the ledger once it left
            if not self._descends_from(target, parent):
                raise UnknownWork(f"{request.target} is not a descendant of {parent}")
            if request.op == "kill":
                value: Any = self._control.kill(target.id, Reason.KILLED)
            elif request.op == "cancel":
                value = self._control.cancel(target.id, float(request.arg))
            elif request.op == "stop":
                value = self._control.stop_teammate(target.id)
            else:
                value = target
        except WorkunitsError as exc:
            reply(False, exc)
        else:
            reply(True, value)

    def _replier(self, parent: str, req: int, route: ReplyRoute | None) -> ReplyRoute:
        """How to answer: through the route given, or the unit's channel (its actor)."""
        if route is not None:
            return route
        return lambda ok, value: reply_to_unit(self._units, parent, req, ok, value)

    def _descends_from(self, record: WorkRecord, ancestor: str) -> bool:
        while record.parent is not None:
            if record.parent == ancestor:
                return True
            try:  # a grandparent that left memory is in the ledger
                record = self._units.get(record.parent)
            except UnknownWork:
                return False
        return False


def child_key(parent: str, key: object) -> str | None:
    """A child's idempotency key, scoped to its parent.

    Keys are one namespace in the ledger; two parents that name a child "fetch"
    must each get their own, and a later attempt of one parent its earlier
    attempt's.
    """
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise SpecError(f"key must be a non-empty str, got {key!r}")
    return f"{parent}/{key}"
