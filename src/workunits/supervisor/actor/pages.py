"""``Supervisor.list``'s pages: the ledger's indexed page, with memory's records in place.

Runs on the SupervisorActor's thread (``ListUnits``), so memory is read as it
is between two messages. The ledger holds every unit (a unit's row is written
before it starts), but memory holds the newest state of the units it has:
a status or progress may not be written yet (progress is grouped per tick).

- Without a status filter, the ledger decides which units a page holds (kind,
  parent, key, submit time and text never change), and each resident unit's
  record replaces its row.
- With one, a resident unit's status is memory's: the ledger's page leaves
  resident units out, and memory's units of that status join it (checked
  against the other filters by the ledger, which has their keys and text).

Either way a page costs an indexed read of ``limit`` rows and one pass over
memory, never a read of the whole ledger. ``page`` in ``paging`` is the same
order for records in hand.
"""

from __future__ import annotations

from dataclasses import replace

from workunits._core.query import Filter, Query
from workunits._core.record import WorkRecord
from workunits._ledger.listing import Mark
from workunits._ledger.rows import EXPIRED
from workunits.supervisor.actor.units import Units


def shown_status(record: WorkRecord) -> str:
    return EXPIRED if record.expired_at is not None else record.status.value


def page(units: Units, query: Query) -> list[WorkRecord]:
    """The page ``query`` asks for (runs on the actor's thread)."""
    found = query.found
    if found.kind is not None:
        found = replace(found, kind=units.kind_name(found.kind))
    if found.parent is not None:
        units.get(found.parent)  # UnknownWork for a parent nobody has heard of
    found = found.checked()
    ledger = units.ledger
    mark = None if query.after is None else _mark(units, query.after)
    resident = {r.id: r for r in units.registry}
    from_memory: list[WorkRecord] = []
    exclude: list[str] = []
    if found.status is not None:
        exclude = list(resident)
        candidates = [
            r
            for r in resident.values()
            if shown_status(r) == found.status and _after(r, mark, query.newest)
        ]
        rest = replace(found, status=None)
        if candidates and rest != Filter():
            ids = [r.id for r in candidates]
            kept = {row.id for row in ledger.listing.page(rest, limit=None, only=ids)}
            candidates = [r for r in candidates if r.id in kept]
        from_memory = candidates
    rows = ledger.listing.page(
        found, limit=query.limit, after=mark, newest=query.newest, exclude=exclude
    )
    records = [resident.get(r.id) or r for r in ledger.units.records(rows)]
    merged = sorted(
        [*records, *from_memory], key=lambda r: (r.created_at, r.id), reverse=query.newest
    )
    return merged if query.limit is None else merged[: query.limit]


def admitted(units: Units, found: Filter, records: list[WorkRecord]) -> list[WorkRecord]:
    """Those of ``records`` (memory's, or rows in memory's place) that ``found`` admits.

    Status, kind and times are read off each record as it is now; the ledger,
    which has their keys and text, checks the rest among these IDs alone.
    """
    kept = [
        r
        for r in records
        if (found.status is None or shown_status(r) == found.status)
        and (found.kind is None or r.kind == found.kind)
        and (found.parent is None or r.parent == found.parent)
        and (found.created_after is None or r.created_at >= found.created_after)
        and (found.created_before is None or r.created_at < found.created_before)
        and (
            found.ended_after is None
            or (r.ended_at is not None and r.ended_at >= found.ended_after)
        )
    ]
    if kept and (found.key is not None or found.text is not None):
        rest = Filter(key=found.key, text=found.text)
        ids = {
            row.id for row in units.ledger.listing.page(rest, limit=None, only=[r.id for r in kept])
        }
        kept = [r for r in kept if r.id in ids]
    return kept


def _mark(units: Units, work_id: str) -> Mark:
    found = units.registry.find(work_id)
    if found is not None:
        return Mark(found.created_at, found.id)
    return units.ledger.listing.mark_of(work_id)


def _after(record: WorkRecord, mark: Mark | None, newest: bool) -> bool:
    if mark is None:
        return True
    at = Mark(record.created_at, record.id)
    return at < mark if newest else at > mark
