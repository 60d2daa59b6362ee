"""``ChildRequests``: what a unit's process asks about its descendants -- start a child;
get, list, read, follow, retry, signal, kill, cancel or stop one of its own descendants.

Owned by the SupervisorActor; runs in its thread. A unit reaches the runtime
only through its channel (DESIGN invariant 15): these requests are how
``wu.current()``'s verbs (``_unit.context``) act on its children, never the
ledger or the state dir's files.

A descendant that has ended and left memory is answered from the ledger, as
the supervisor's own calls answer: ``get`` is its record, ``kill``, ``cancel``
and ``stop`` are False (it is not running). An error goes back to the unit as
the exception itself, so the unit catches it by its class (``wu.UnknownWork``),
as a caller of the supervisor does.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from workunits._core.errors import (
    LedgerGone,
    SandboxUnavailable,
    SpecError,
    UnknownWork,
    WorkunitsError,
)
from workunits._core.query import Filter, Query
from workunits._core.record import WorkRecord
from workunits._core.status import Reason
from workunits._surface import paging
from workunits._wire import frames as m
from workunits._wire.actor_messages import ReplyRoute
from workunits.supervisor.actor import pages
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.batches import BatchLimit
from workunits.supervisor.actor.control import UnitControl
from workunits.supervisor.actor.messaging import reply_to_unit
from workunits.supervisor.actor.output import OutputReads
from workunits.supervisor.actor.rerun import Reruns
from workunits.supervisor.actor.signals import Signals
from workunits.supervisor.actor.starts import Starts
from workunits.supervisor.actor.units import Units


class ChildRequests:
    def __init__(
        self,
        *,
        units: Units,
        starts: Starts,
        control: UnitControl,
        output: OutputReads,
        reruns: Reruns,
        signals: Signals,
        submit_many: Callable[[rq.SubmitMany], list[WorkRecord | BaseException]],
    ) -> None:
        self._units = units
        self._starts = starts
        self._control = control
        self._output = output
        self._reruns = reruns
        self._signals = signals
        self._submit_many = submit_many  # GroupedSubmits.submit_many: a batch, one commit

    def spawn(
        self, parent: str, request: m.Spawn | m.SpawnMany, route: ReplyRoute | None = None
    ) -> None:
        if isinstance(request, m.SpawnMany):
            self._spawn_many(parent, request, route)
            return
        reply = self._replier(parent, request.req, route)
        try:
            record, created = self._starts.register(
                request.letter,
                request.spec,
                _child_options(parent, request),
                restart=request.restart,
                trace=request.trace,
            )
        except (SpecError, SandboxUnavailable, LedgerGone) as exc:
            # Raised in the unit as they are here (plain errors: they pickle whole).
            reply(False, type(exc)(str(exc)))
        except WorkunitsError as exc:
            reply(False, exc)
        else:
            reply(True, (record.id, created))

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
                rq.Register(s.letter, s.spec, _child_options(parent, s), trace=s.trace)
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
        """One of ``m.Control``'s operations, on the unit's own descendants only."""
        reply = self._replier(parent, request.req, route)
        try:
            value = self._carry_out(parent, request.op, request.target, request.arg)
        except WorkunitsError as exc:
            reply(False, exc)
        else:
            reply(True, value)

    def _carry_out(self, parent: str, op: str, target: str, arg: Any) -> Any:  # noqa: PLR0912 - a case each
        if op == "list":
            return self._descendants(parent, arg)
        unit = self._units.get(target)  # memory, or the ledger once it left
        if not self._descends_from(unit, parent):
            raise UnknownWork(f"{target} is not a descendant of {parent}")
        match op:
            case "kill":
                return self._control.kill(unit.id, Reason.KILLED)
            case "cancel":
                return self._control.cancel(unit.id, float(arg))
            case "stop":
                return self._control.stop_teammate(unit.id)
            case "read":
                return self._output.read(unit.id, arg)  # the data, and the record read against
            case "chunk":
                offset, max_bytes = arg
                return self._output.chunk(unit.id, offset, max_bytes)
            case "retain":
                return self._control.retain(unit.id)
            case "release":
                return self._control.release(unit.id)
            case "retry":
                again, created = self._reruns.retry(unit.id)
                return again.id, created
            case "signal":
                name, value = arg
                return self._signals.send(unit.id, name, value)
            case "input":
                data, eof = arg
                return self._control.send_input(unit.id, data, eof)
            case "get":
                return unit
        raise SpecError(f"no operation {op!r} on a child")

    def _descendants(self, ancestor: str, q: Query) -> list[WorkRecord]:
        """The page ``q`` asks for among the descendants of ``ancestor`` (of one of them,
        when ``q`` names it as the parent)."""
        found = q.found
        top = ancestor if found.parent is None else found.parent
        if top != ancestor and not self._descends_from(self._units.get(top), ancestor):
            raise UnknownWork(f"{top} is not a descendant of {ancestor}")
        if found.kind is not None:
            found = replace(found, kind=self._units.kind_name(found.kind))
        found = found.checked()
        records: list[WorkRecord] = []
        parents = [top]
        while parents:  # each level is one indexed page per parent, memory's records in place
            children = pages.page(self._units, Query(Filter(parent=parents.pop())))
            records += children
            parents += (child.id for child in children)
        kept = pages.admitted(self._units, replace(found, parent=None), records)
        after = None if q.after is None else self._units.get(q.after)
        return paging.page(kept, q.limit, after, newest=q.newest)

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


def _child_options(parent: str, request: m.Spawn) -> Any:
    """A child's options (a ``UnitOptions``): its parent, and its key scoped to the parent."""
    options = request.options
    return dataclasses.replace(options, parent=parent, key=child_key(parent, options.key))


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
