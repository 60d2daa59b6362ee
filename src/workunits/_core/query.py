"""What a ``list`` call asks for: its filter and its page, checked once for every surface.

Plain data, loaded by every process (a unit's ``ctx.list`` too): the ledger
reads a ``Query`` by its indexes (``_ledger.listing``), the supervisor merges
memory's records in (``supervisor.actor.pages``), and records already in hand
are filtered by the same rules (``Filter.admits``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from workunits._core import ids as _ids
from workunits._core.errors import SpecError
from workunits._core.status import Status

EXPIRED = "expired"  # the status a listing shows for a unit whose retention ran out
MAX_WORDS = 16  # a search of more words is refused: each is a lookup in the index
_STATUSES = frozenset(s.value for s in Status)
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class Filter:
    """Which units a page holds; every field None means all of them.

    ``status`` is a status or ``expired`` (a real status lists the units that
    have it and are not expired); ``kind`` a kind's name; ``created_after``
    (inclusive) and ``created_before`` (exclusive) bound the submit time, in
    seconds since the epoch; ``text`` is a search (see the module's docstring).
    """

    status: str | None = None
    kind: str | None = None
    parent: str | None = None
    key: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    ended_after: float | None = None
    text: str | None = None

    def checked(self) -> Filter:
        """This filter, or SpecError saying which field is wrong and what it takes."""
        if self.status is not None and self.status != EXPIRED and self.status not in _STATUSES:
            raise SpecError(
                f"{self.status!r} is not a status: status must be one of "
                f"{sorted(_STATUSES)} or {EXPIRED!r}"
            )
        if self.parent is not None:
            _ids.validate(self.parent)
        for name in ("created_after", "created_before", "ended_after"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise SpecError(f"{name} must be seconds since the epoch (a number), got {value!r}")
        for name in ("kind", "key", "text"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise SpecError(f"{name} must be a string, got {value!r}")
        if self.text is not None:
            if not words(self.text):
                return replace(self, text=None)  # nothing to search for: no filter
            if len(words(self.text)) > MAX_WORDS:
                raise SpecError(f"a search takes at most {MAX_WORDS} words, got {self.text!r}")
        return self

    @property
    def only_counted(self) -> bool:
        """Whether ``unit_counts`` answers this filter's total (kind and status only)."""
        return all(
            getattr(self, name) is None
            for name in ("parent", "key", "created_after", "created_before", "ended_after", "text")
        )


@dataclass(frozen=True, slots=True)
class Query:
    """A page: the units ``found`` matches, after the unit ``after``, at most ``limit``."""

    found: Filter
    limit: int | None = None
    after: str | None = None
    newest: bool = False


ORDERS = ("oldest", "newest")


def check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise SpecError(f"limit must be an int >= 1, got {limit!r}")


def query(
    status: Status | str | None = None,
    kind: str | None = None,
    parent: str | None = None,
    *,
    limit: int | None = None,
    after: str | None = None,
    key: str | None = None,
    created_after: float | None = None,
    created_before: float | None = None,
    search: str | None = None,
    order: str = "oldest",
) -> Query:
    """The page a ``list`` call asks for, its arguments checked once for every surface
    (``Supervisor``, ``Client``, the HTTP API): SpecError says what is wrong."""
    check_limit(limit)
    if order not in ORDERS:
        raise SpecError(f"order must be 'oldest' or 'newest', got {order!r}")
    if after is not None:
        if not isinstance(after, str):
            raise SpecError(
                f"after must be the ID of the last unit of the previous page, got {after!r}"
            )
        _ids.validate(after)
    shown = status.value if isinstance(status, Status) else status
    found = Filter(
        status=shown,
        kind=kind,
        parent=parent,
        key=key,
        created_after=created_after,
        created_before=created_before,
        text=search,
    ).checked()
    return Query(found, limit, after, order == "newest")


def words(text: str) -> list[str]:
    """The words of a search or of a field, as both search indexes split them (lower case)."""
    return _WORD.findall(text.casefold())


def matches(text: str, fields: Iterable[str | None]) -> bool:
    """Whether every word of ``text`` starts a word of one of ``fields`` (see the docstring)."""
    have = [w for f in fields if f for w in words(f)]
    return all(any(h.startswith(w) for h in have) for w in words(text))
