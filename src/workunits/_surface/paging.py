"""``list(limit=, after=, ...)``: the filters and keyset pages every surface offers.

Units are ordered by (created_at, id), which never changes for a unit, so a
page that starts after the last unit of the previous one neither repeats nor
skips a unit that existed then; units created since appear on later pages.
``order="newest"`` walks the same order backwards, newest first (a live
view's first page); its later pages hold older units.

``query`` (``_core.query``) checks a caller's arguments once, for
``Supervisor``, ``Client`` and the HTTP API alike; ``every`` reads all pages of a list without a
``limit``, one bounded read at a time, so no single read (and, in a
supervisor, no single message to its actor) costs the whole ledger.
``page`` orders records already in hand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace

from workunits._core.query import Query, check_limit, query
from workunits._core.record import WorkRecord

__all__ = ["EVERY_PAGE", "Query", "check_limit", "every", "every_async", "page", "query"]

EVERY_PAGE = 1000  # list() without a limit reads pages of this many


def every(ask: Callable[[Query], list[WorkRecord]], q: Query) -> list[WorkRecord]:
    """``q``'s records: one page when it has a limit, else every page in turn."""
    if q.limit is not None:
        return ask(q)
    out: list[WorkRecord] = []
    q = replace(q, limit=EVERY_PAGE)
    while True:
        got = ask(q)
        out += got
        if len(got) < EVERY_PAGE:
            return out
        q = replace(q, after=got[-1].id)


async def every_async(
    ask: Callable[[Query], Awaitable[list[WorkRecord]]], q: Query
) -> list[WorkRecord]:
    """Like ``every``, awaiting each page."""
    if q.limit is not None:
        return await ask(q)
    out: list[WorkRecord] = []
    q = replace(q, limit=EVERY_PAGE)
    while True:
        got = await ask(q)
        out += got
        if len(got) < EVERY_PAGE:
            return out
        q = replace(q, after=got[-1].id)


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
