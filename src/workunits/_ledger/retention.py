"""Retention: ended units expire to a small row, and much later are forgotten.

Expiry drops what is heavy and no longer needed -- spec, result, cause,
output tail, checkpoint -- and keeps how the unit ended, so the ledger
still answers for it, with its status shown as ``expired`` (invariant 8),
never "unknown" or "pending". Forgetting deletes the row; the ID is unknown
afterwards.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable

from workunits._core import ids
from workunits._core.seconds import seconds_or_none
from workunits._ledger import retains
from workunits._ledger.backend import Connection, Row
from workunits._ledger.context import LedgerContext
from workunits._ledger.rows import IN_TERMINAL, TERMINAL
from workunits._util import outputfile

# What expiry drops: everything heavy, keeping how the unit ended.
_DROP = (
    "SET expired_at = ?, spec = NULL, spec_mac = NULL, spec_versions = NULL, "
    "result = NULL, result_format = NULL, result_mac = NULL, result_versions = NULL, "
    "cause = NULL, cause_format = NULL, cause_mac = NULL, cause_versions = NULL, "
    "output_tail = NULL, checkpoint = NULL, checkpoint_mac = NULL, progress_message = NULL, "
    "spec_file = NULL, result_file = NULL, checkpoint_file = NULL"
)
# The value store files the rows being expired refer to, deleted after the commit.
_FILES = "spec_file, result_file, checkpoint_file"
_HEAVY_BYTES = (
    "coalesce(length(spec), 0) + coalesce(length(result), 0) + coalesce(length(cause), 0) "
    "+ coalesce(length(output_tail), 0) + coalesce(length(checkpoint), 0)"
)


# A unit a live lease retains does not expire; `retains.prune` first drops lapsed leases.
_UNRETAINED = "NOT EXISTS (SELECT 1 FROM retains WHERE retains.unit = units.id)"


class Retention:
    """Expiry and forgetting in one Ledger. Every method runs in the calling thread."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def expire(self) -> int:
        """Drop spec, result, output tail, checkpoint and transcript (or kept log) of
        ended units past ``expire_at``.

        The small row stays and reads ``expired``; retained units wait. Returns
        how many units expired now.
        """
        return len(self.expire_due())

    def expire_due(self) -> list[str]:
        """``expire``, returning the IDs of the units that expired now."""
        expired = self._expire_due(self._ctx.now())
        if expired:
            self._ctx.db.give_back_space()
        return expired

    def _expire_due(self, now: float) -> list[str]:
        """Expire ended, unretained units whose ``expire_at`` has passed; their IDs.

        Their value store files and transcripts go after the commit.
        """
        # INDEXED BY: without statistics SQLite would pick the status index and
        # visit every ended unit; units_expire holds only those due.
        where = (
            "WHERE expired_at IS NULL AND expire_at <= ? "
            f"AND {_UNRETAINED} AND status IN {IN_TERMINAL}"
        )
        # NORMAL sync: an expiry lost to a power cut is simply done again. The
        # SELECT and the UPDATE see the same rows: the write lock is held for both.
        with self._ctx.db.write(durable=False) as conn:
            retains.prune(conn, now)
            rows = conn.execute(
                f"SELECT id, {_FILES} FROM units INDEXED BY units_expire {where}",  # noqa: S608
                (now, *TERMINAL),
            ).fetchall()
            if rows:
                conn.execute(
                    f"UPDATE units INDEXED BY units_expire {_DROP} {where}", (now, now, *TERMINAL)
                )
                _drop_notices_of_expired(conn)
            expired, files = [str(r[0]) for r in rows], _files_of(rows)
        self._drop_transcripts(expired)
        self._ctx.large.delete(files)
        return expired

    def expire_ended_before(self, cut: float) -> tuple[int, int]:
        """Expire what is due and every ended, unretained unit that ended at or before ``cut``.

        For ``gc --older-than``: a person asks for room now, whatever each
        unit's ``expire_at`` says. Returns ``(units, bytes)``: how many units
        expired now and how many bytes of stored values (spec, result, cause,
        output tail, checkpoint) and transcripts they dropped.
        """
        now = self._ctx.now()
        where = (
            f"WHERE expired_at IS NULL AND {_UNRETAINED} AND status IN {IN_TERMINAL} "
            "AND (ended_at <= ? OR expire_at <= ?)"
        )
        params = (*TERMINAL, cut, now)
        with self._ctx.db.write(durable=False) as conn:
            retains.prune(conn, now)
            rows = conn.execute(
                f"SELECT id, {_FILES}, {_HEAVY_BYTES} FROM units {where}",  # noqa: S608
                params,
            ).fetchall()
            if rows:
                conn.execute(f"UPDATE units {_DROP} {where}", (now, *params))
                _drop_notices_of_expired(conn)
            expired = [str(r[0]) for r in rows]
            freed, files = sum(int(r[4]) for r in rows), _files_of(rows)
        freed += self._drop_transcripts(expired) + self._ctx.large.delete(files)
        if expired:
            self._ctx.db.give_back_space()
        return len(expired), freed

    def gc(self, older_than: float | None = None) -> int:
        """Expire what is due, then forget units expired more than ``older_than`` s ago.

        Also drops delivered notices of forgotten units, finished requests and
        closed sessions older than that. ``older_than`` defaults to
        ``expire_after``. Returns how many unit rows were deleted; their IDs are
        unknown to the ledger afterwards.
        """
        age = seconds_or_none("older_than", older_than, zero=True, none="the ledger's expire_after")
        now = self._ctx.now()
        self._expire_due(now)
        if age is None:
            age = self._ctx.expire_after
        forgotten = self._forget(now - age)
        self.sweep_values()
        self._ctx.db.give_back_space()
        return forgotten

    def _forget(self, cut: float) -> int:
        """Delete units expired before ``cut``, and bookkeeping that ended before it
        (finished requests, closed sessions, schedules' firings but each one's latest).

        Unacknowledged notices of units that have not expired stay whatever their
        age: a parent may still come for them. Returns how many unit rows were deleted.
        """
        with self._ctx.db.write(durable=False) as conn:
            deleted = conn.execute(
                "DELETE FROM units WHERE expired_at IS NOT NULL AND expired_at <= ?", (cut,)
            ).rowcount
            conn.execute("DELETE FROM notifications WHERE delivered_at IS NOT NULL")
            _drop_notices_of_expired(conn)
            conn.execute("DELETE FROM requests WHERE done_at IS NOT NULL AND done_at <= ?", (cut,))
            conn.execute(
                "DELETE FROM sessions WHERE ended_at IS NOT NULL AND ended_at <= ?", (cut,)
            )
            # A schedule's record of firings, but its latest (what listings show as `last`).
            conn.execute(
                "DELETE FROM schedule_firings WHERE recorded_at <= ? AND due_at < "
                "(SELECT max(f.due_at) FROM schedule_firings f "
                "WHERE f.schedule = schedule_firings.schedule)",
                (cut,),
            )
        return deleted

    def sweep_values(self) -> int:
        """Delete value store files no row refers to (see ``largevalues``); the bytes freed."""
        if self._ctx.db.readonly:
            return 0
        with self._ctx.db.read() as conn:
            # File times are the real clock's, whatever clock this Ledger was given.
            orphans = self._ctx.large.orphans(conn, time.time())
        return self._ctx.large.delete(orphans)

    def _drop_transcripts(self, work_ids: Iterable[str]) -> int:
        """Delete the transcripts and kept logs of expired units (after the commit);
        the bytes freed. A pointer to a caller's log goes, the caller's file stays."""
        freed = 0
        for work_id in work_ids:
            if not ids.is_valid(work_id):
                continue  # a path is never built from an unchecked value, even our own row's
            for path in outputfile.kept_paths(self._ctx.state_dir, work_id):
                try:
                    info = os.lstat(path)
                    os.unlink(path)
                except FileNotFoundError:
                    continue  # not of this kind, or already gone
                if not stat.S_ISLNK(info.st_mode):
                    freed += info.st_size
        return freed


def _files_of(rows: list[Row]) -> list[str]:
    return [str(name) for r in rows for name in (r[1], r[2], r[3]) if name is not None]


def _drop_notices_of_expired(conn: Connection) -> None:
    """An expired unit's notice goes with it: nobody can act on a unit the ledger forgot."""
    conn.execute(
        "DELETE FROM notifications WHERE id IN "
        "(SELECT id FROM units WHERE expired_at IS NOT NULL) OR id NOT IN (SELECT id FROM units)"
    )
    # Its signals too (consumed at its end at the latest).
    conn.execute(
        "DELETE FROM signals WHERE unit IN "
        "(SELECT id FROM units WHERE expired_at IS NOT NULL) OR unit NOT IN (SELECT id FROM units)"
    )
