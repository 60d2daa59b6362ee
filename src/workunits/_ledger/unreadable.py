"""Rows the ledger cannot hand out whole: decoded one by one, reported, left for a repair.

A row changed outside workunits -- a status no lifecycle has, an attempt that
is text, a value file deleted from ``values/`` -- fails to decode
(``LedgerCorrupt``) or its values fail their checks (``LedgerCorrupt``,
``LedgerTampered``). One such row must not stop a reader of many rows -- a
listing, a supervisor's recovery, its claims -- from handling the others
(invariant 14: the supervisor never crashes or hangs because of a unit). Those
readers decode row by row: a row that fails becomes an ``Unreadable`` naming
its unit and the error, and the others go on.

Nothing is written to a row that does not decode on its behalf: the fenced
write path reads its status and attempt, and a guess at them could end a unit
that a repair would have resumed. It stays as it is (its owning ``session``
aside, see ``claims`` and ``sessions``) until someone repairs it as its error
says. A row that decodes but whose stored value failed its check has sound
lifecycle columns: its reader may end it (recovery fails it ``lost``).

``report`` logs each once per process, so a supervisor's tick or a live view
that meets the same row again does not repeat itself.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass

from workunits._core.errors import LedgerCorrupt, LedgerError
from workunits._ledger.backend import Row
from workunits._ledger.rows import UnitRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A row its reader skipped: its unit and why (the error says how to repair it).

    ``id``: the row's ID column as stored (not an ID when that is what is wrong).
    ``row``: its columns when they decode and only a stored value failed its
    check, with the unverified values left out (no result, cause or
    checkpoint); None when the row itself does not decode.
    """

    id: str
    error: LedgerError
    row: UnitRow | None = None


def decode(row: Row, *, listed: bool = False) -> UnitRow | Unreadable:
    """The row decoded (``listed``: a list's columns only), or an Unreadable naming
    what is wrong with it."""
    try:
        return UnitRow.from_sql(row, listed=listed)
    except LedgerCorrupt as exc:
        return Unreadable(str(row["id"]), exc)


def failed_check(row: UnitRow, error: LedgerError) -> Unreadable:
    """``row``, whose stored values failed ``error``, without them."""
    bare = dataclasses.replace(row, result=None, cause=None, checkpoint=None, checkpoint_file=None)
    return Unreadable(row.id, error, bare)


# Guards _reported; held for a set lookup and insert only.
_lock = threading.Lock()
# (level, unit, message) already logged by this process.
_reported: set[tuple[int, str, str]] = set()


def report(bad: Unreadable, level: int, outcome: str) -> None:
    """Log ``bad`` at ``level``, once per process for each unit and error.

    ``outcome`` says what became of the unit ("left out of the list").
    """
    message = str(bad.error)
    with _lock:
        seen = (level, bad.id, message) in _reported
        _reported.add((level, bad.id, message))
    if not seen:
        log.log(level, "ledger: unit %.60s %s: %s", bad.id, outcome, message)
