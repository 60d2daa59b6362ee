"""``Supervisor.list(limit=, after=)``: records a page at a time, in a stable order.

Units are ordered by (created_at, id), which never changes for a unit, so a
page that starts after the last unit of the previous one neither repeats nor
skips a unit that existed then; units created since appear on later pages.
``newest=True`` walks the same order backwards, newest first (a live view's
first page); its later pages hold older units.
"""

from __future__ import annotations

from collections.abc import Iterable

from workunits._core.errors import SpecError
from workunits._core.record import WorkRecord


def check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise SpecError(f"limit must be an int >= 1, got {limit!r}")


def page(
    records: Iterable[WorkRecord],
    limit: int | None,
    after: WorkRecord | None,
    *,
    newest: bool = False,
) -> list[WorkRecord]:
    """Records after ``after`` (in (created_at, id) order, or its reverse with
    ``newest``), at most ``limit`` of them."""
    ordered = sorted(records, key=lambda r: (r.created_at, r.id), reverse=newest)
    if after is not None:
        mark = (after.created_at, after.id)
        if newest:
            ordered = [r for r in ordered if (r.created_at, r.id) < mark]
        else:
            ordered = [r for r in ordered if (r.created_at, r.id) > mark]
    return ordered if limit is None else ordered[:limit]
