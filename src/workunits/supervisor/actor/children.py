"""``ChildRequests``: what a unit's process asks about its descendants -- start a child;
get, list, read, follow, retry, signal, kill, cancel or stop one of its own descendants.

Owned by the SupervisorActor; runs in its thread. A unit reaches the runtime
only through its channel (DESIGN invariant 15): these requests are how
``wu.current()``'s verbs (``_unit.context``) act on its children, never the
ledger or the state dir's files. Each answers the unit's request with a
``Reply``; an error is its class name and message, raised again in the unit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

from workunits._core.errors import SpecError, UnknownWork, WorkunitsError
from workunits._core.query import Filter, Query
from workunits._core.record import WorkRecord
from workunits._core.status import Reason
from workunits._surface import paging
from workunits._wire import frames as m
from workunits.supervisor.actor import pages
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
    ) -> None:
        self._units = units
        self._starts = starts
        self._control = control
        self._output = output
        self._reruns = reruns
        self._signals = signals

    def spawn(self, parent: str, request: m.Spawn) -> None:
        try:
            options = dataclasses.replace(
                request.options, parent=parent, key=child_key(parent, request.options.key)
            )
            record, created = self._starts.register(
                request.letter, request.spec, options, restart=request.restart
            )
        except WorkunitsError as exc:
            self._reply(parent, request.req, False, f"{type(exc).__name__}: {exc}")
        else:
            self._reply(parent, request.req, True, (record.id, created))

    def control(self, parent: str, request: m.Control) -> None:
        """One of ``m.Control``'s operations, on the unit's own descendants only."""
        try:
            value = self._carry_out(parent, request.op, request.target, request.arg)
        except WorkunitsError as exc:
            self._reply(parent, request.req, False, f"{type(exc).__name__}: {exc}")
        else:
            self._reply(parent, request.req, True, value)

    def _carry_out(self, parent: str, op: str, target: str, arg: Any) -> Any:  # noqa: PLR0912 - a case each
        if op == "list":
            return self._descendants(parent, arg)
        unit = self._units.lookup(target)
        if not self._descends_from(unit, parent):
            raise UnknownWork(f"{target} is not a descendant of {parent}")
        match op:
            case "kill":
                return self._control.kill_resident(unit.id, Reason.KILLED)
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
        if top != ancestor and not self._descends_from(self._units.lookup(top), ancestor):
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
        after = None if q.after is None else self._units.lookup(q.after)
        return paging.page(kept, q.limit, after, newest=q.newest)

    def _reply(self, parent: str, req: int, ok: bool, value: Any) -> None:
        reply_to_unit(self._units, parent, req, ok, value)

    def _descends_from(self, record: WorkRecord, ancestor: str) -> bool:
        while record.parent is not None:
            if record.parent == ancestor:
                return True
            found = self._units.registry.find(record.parent)
            if found is None:
                return False
            record = found
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
