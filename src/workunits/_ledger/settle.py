"""Settling a write whose COMMIT lost its answer, by reading back what it would have written.

On PostgreSQL a connection can drop after the server received a COMMIT and
before its answer arrived (a server crash, a failover, a network cut): the
write may have landed or not, and the database layer says so with
CommitUnknown (``backend``). Saying "nothing was written" would be a lie
that runs a unit twice (its caller submits again) or strands it (claimed
here, never started). So each writer settles the question before anyone is
told, by reading back what only its own write could have put there -- the
IDs and tokens are minted before the write:

- a submit: its unit's ID (``store``);
- a claim of pending units: those rows naming this session (``claims``);
- a takeover: the sessions it marked, and the units it moved (``sessions``);
- a schedule's firing: the firing's record (``schedules``);
- an end: the row's status at its attempt -- a replayed end is recognised,
  so the write is simply tried again (``writes``);
- an acknowledgement or a notice's claim: its token (``outbox``).

``read_back`` retries the read until the ledger answers, for up to
``SETTLE_WITHIN`` seconds (a PostgreSQL restart or failover takes a few);
then the writer raises CommitUnknown naming what to look up. SQLite commits
in-process: its only ambiguity is a crash, and recovery settles that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from workunits._core.errors import (
    CommitUnknown,
    LedgerCorrupt,
    LedgerError,
    LedgerTampered,
    LedgerVersionError,
    NoLedger,
    SessionLost,
    ValueVersionMismatch,
)
from workunits._ledger.backend import Connection, Database

log = logging.getLogger(__name__)

# Seconds a writer keeps trying to read back a write whose COMMIT lost its answer.
SETTLE_WITHIN = 10.0
_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 1.0
# Failures no second read mends: the ledger is damaged, foreign, or not ours to write.
_FOR_GOOD = (
    LedgerCorrupt,
    LedgerTampered,
    LedgerVersionError,
    NoLedger,
    SessionLost,
    ValueVersionMismatch,
)

T = TypeVar("T")


def transient(exc: BaseException) -> bool:
    """A failure of the ledger's moment (unreachable, restarting, locked), worth a retry."""
    return isinstance(exc, LedgerError) and not isinstance(exc, _FOR_GOOD)


def read_back(
    db: Database,
    probe: Callable[[Connection], T],
    *,
    within: float,
    what: str,
    work_id: str | None = None,
    cause: CommitUnknown | None = None,
) -> T:
    """``probe`` in a read snapshot, retried until the ledger answers; its answer.

    Runs in the writer's thread. ``within``: seconds from now to keep trying;
    past them, CommitUnknown saying ``what`` is unknown and naming ``work_id``.
    """
    deadline = time.monotonic() + within
    pause = _FIRST_PAUSE
    while True:
        remaining = deadline - time.monotonic()
        try:
            with db.read(timeout=max(remaining, _FIRST_PAUSE)) as conn:
                return probe(conn)
        except LedgerError as exc:
            if not transient(exc):
                raise
            if time.monotonic() + pause >= deadline:
                look = f"; look up {work_id} (get) to learn whether it exists" if work_id else ""
                raise CommitUnknown(
                    f"{what}: the ledger {db.where} lost its answer to the COMMIT, and could "
                    f"not be read back within {within:g} s ({exc}){look}",
                    work_id,
                ) from (cause or exc)
            log.debug("ledger: reading back %s failed (%s); trying again", what, exc)
        time.sleep(pause)  # a backoff between reads of a ledger that is away, not a sync
        pause = min(pause * 2, _LONGEST_PAUSE)


def settled_write(
    db: Database,
    write: Callable[[], T],
    landed: Callable[[Connection], T | None],
    *,
    within: float,
    what: str,
    work_id: str | None = None,
) -> T:
    """``write()``, its lost COMMIT answer settled: what ``landed`` reads back, when the
    write is found in the ledger (None: it is not, and ``write`` runs once more).

    ``landed`` must tell this write from any other: by an ID or a token minted
    before it, or a value only this writer puts there. A second lost answer
    that reads back as nothing written raises LedgerError saying so.
    """
    for last in (False, True):
        try:
            return write()
        except CommitUnknown as exc:
            found = read_back(db, landed, within=within, what=what, work_id=work_id, cause=exc)
            if found is not None:
                return found
            if last:
                raise LedgerError(
                    f"{what}: the ledger {db.where} lost its answer to the COMMIT twice, and "
                    f"read back, nothing was written; try again"
                ) from exc
    raise AssertionError("unreachable")  # pragma: no cover
