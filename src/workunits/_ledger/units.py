"""Units: the ``units`` table's submits and reads, for one Ledger.

A submit is one ``BEGIN IMMEDIATE`` transaction, fully synced, that checks the
idempotency key and inserts the row (``submits``; invariant 12); the submits
of this process's threads share commits (``submit_group``), and a
supervisor's actor commits the ones that arrived together with one
``submit_many``. Every row read is ``checked`` (its signed values verified)
before it is handed out. What a running attempt writes is ``attempts``'.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from workunits._core import ids
from workunits._core.errors import (
    CommitUnknown,
    IdempotencyConflict,
    LedgerCorrupt,
    LedgerError,
    SpecError,
    UnknownWork,
    WorkunitsError,
)
from workunits._core.query import Filter
from workunits._core.record import WorkRecord
from workunits._core.status import Status, is_terminal
from workunits._ledger import sessions, settle, submits, values
from workunits._ledger.context import LedgerContext
from workunits._ledger.listing import Listing
from workunits._ledger.outbox import Outbox
from workunits._ledger.rows import NewUnit, UnitRow
from workunits._ledger.submit_group import SubmitGroup
from workunits._ledger.unreadable import Unreadable

# A unit whose checkpoint file was removed under a read (a newer one saved) is read
# again, this many times at most.
_READS_PAST_A_NEW_CHECKPOINT = 5


class Units:
    """Submit and read the units of one Ledger. Every method runs in the calling thread."""

    def __init__(self, ctx: LedgerContext, outbox: Outbox, listing: Listing) -> None:
        self._ctx = ctx
        self._outbox = outbox
        self._listing = listing
        # Submits from this process's threads share commits (``submit_group``).
        self._group = SubmitGroup(self.submit_many)

    # -- submit ----------------------------------------------------------------------

    def submit(self, new: NewUnit, *, wake: bool = True) -> tuple[UnitRow, bool]:
        """Insert ``new`` (``pending``, or ``running`` when it has ``started_at``), or return
        the unit that already has its key.

        Returns ``(row, created)``. The same key with the same spec hash returns
        the existing unit whatever its status (expired too) with
        ``created=False``; the same key with another spec raises
        IdempotencyConflict. Check and insert are one ``BEGIN IMMEDIATE``
        transaction, so concurrent submits from several processes make one unit
        per key (invariant 12). Fully synced before it returns.

        ``wake=False``: a supervisor's own unit, which no other supervisor should
        adopt; otherwise a pending unit wakes the supervisors listening on a
        PostgreSQL ledger (``backend``).

        Threads of this process that submit at once share one commit
        (``submit_group``); each still returns once its own row is durable.
        """
        if wake:
            return self._group.submit(new)
        (answer,) = self.submit_many([new], wake=wake)
        if isinstance(answer, WorkunitsError):
            raise answer
        return answer

    def submit_many(
        self, batch: Iterable[NewUnit], *, wake: bool = True
    ) -> builtins.list[tuple[UnitRow, bool] | WorkunitsError]:
        """Several submits in one fully synced transaction: one fsync for the group.

        Each answer is what ``submit`` would return, or the error it would raise
        for that unit alone (IdempotencyConflict, a SpecError about its text, a
        LedgerError keeping its large spec): one submit's error does not stop
        the others. A failure of the transaction itself raises, and then none
        is in the ledger; a COMMIT that lost its answer is read back (``_insert``),
        and only when that cannot reach the ledger in time is each answer a
        CommitUnknown naming its unit. For a supervisor's group commit of the
        submits that arrived together (``supervisor.actor.submits``).
        """
        large = self._ctx.large
        prepared: builtins.list[tuple[NewUnit, str] | WorkunitsError] = []
        try:
            for new in batch:
                try:
                    digest = _check_new(new)  # first: a refused unit leaves no file behind
                    prepared.append((self._kept(new), digest))
                except WorkunitsError as exc:
                    prepared.append(exc)
        except BaseException:  # nothing is inserted: the files kept so far are no one's
            large.delete(p[0].spec.file for p in prepared if not isinstance(p, WorkunitsError))
            raise
        ready = [p for p in prepared if not isinstance(p, WorkunitsError)]
        pending = [new.id for new, _ in ready if new.started_at is None]
        woken = None if not (wake and pending) else f"unit:{pending[0]}"
        try:
            inserted = self._insert(ready, woken)
        except BaseException:
            large.delete(new.spec.file for new, _ in ready)
            raise
        # A key that found its unit (or conflicted) inserted nothing: its file is no one's.
        # (A unit whose commit is unknown may have a row pointing at its file: kept.)
        large.delete(
            new.spec.file
            for (new, _), a in zip(ready, inserted, strict=True)
            if isinstance(a, IdempotencyConflict) or (not isinstance(a, CommitUnknown) and not a[1])
        )
        answers = iter(inserted)
        out: builtins.list[tuple[UnitRow, bool] | WorkunitsError] = []
        for p in prepared:
            if isinstance(p, WorkunitsError):
                out.append(p)
                continue
            a = next(answers)
            if isinstance(a, WorkunitsError) or a[1]:
                out.append(a)
                continue
            try:  # the existing unit, as any read shows it (its spec's seal checked)
                out.append((self._ctx.checked(a[0]), False))
            except WorkunitsError as exc:
                out.append(exc)
        return out

    def _insert(
        self, ready: builtins.list[tuple[NewUnit, str]], woken: str | None
    ) -> Sequence[tuple[UnitRow, bool] | IdempotencyConflict | CommitUnknown]:
        """Insert ``ready`` in one fully synced transaction; per unit, what ``insert`` says.

        A COMMIT that lost its answer is settled by reading the units back by the
        IDs minted for them (``settle``): found, they were written; none found,
        nothing was, and the transaction runs once more. When the read-back cannot
        reach the ledger in time, each unit's answer is CommitUnknown naming it
        (and its spec's file stays: a row may point at it; ``sweep_values``
        removes it if none does).
        """
        db = self._ctx.db
        for last in (False, True):
            try:
                with db.write(durable=True, wake=woken) as conn:
                    return [submits.insert(conn, new, digest) for new, digest in ready]
            except CommitUnknown as exc:
                what = f"the submit of {', '.join(new.id for new, _ in ready[:3])}"
                if len(ready) > 3:
                    what += f" and {len(ready) - 3} more"
                try:
                    found = settle.read_back(
                        db,
                        lambda conn: submits.read_back(conn, ready),
                        within=self._ctx.settle_within,
                        what=what,
                        cause=exc,
                    )
                except CommitUnknown as unknown:
                    return [CommitUnknown(_about(unknown, new.id), new.id) for new, _ in ready]
                if found is not None:
                    return found
                if last:
                    raise LedgerError(
                        f"{what}: the ledger {db.where} lost its answer to the COMMIT "
                        f"twice, and read back, nothing was written; submit again"
                    ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def prepared(self, new: NewUnit) -> tuple[NewUnit, str]:
        """``new`` as its row keeps it, and its spec's digest: what a submit inserts
        (here, or in a schedule's firing: ``schedules``)."""
        return self._kept(new), _check_new(new)

    def _kept(self, new: NewUnit) -> NewUnit:
        """``new`` as the row keeps it: a large spec by reference, an unresumable one not at all.

        A unit its supervisor starts at once and that cannot resume never needs
        its spec again (a lost attempt fails ``lost``), so its arguments are not
        written anywhere: an empty spec blob is stored as NULL. Its spec hash
        (from the whole spec) still answers an idempotent resubmit.
        """
        if new.started_at is not None and not new.resumable and new.policy_json is None:
            spec = dataclasses.replace(new.spec, data=b"", mac=None, versions=None, file=None)
        else:
            spec = self._ctx.large.offload(new.spec, purpose="spec", work_id=new.id, durable=True)
        return new if spec is new.spec else dataclasses.replace(new, spec=spec)

    def encode_spec(self, spec: object, work_id: str) -> values.Stored:
        """``spec`` signed with this state dir's key, for a :class:`NewUnit`."""
        return values.encode_spec(spec, work_id=work_id, key=self._ctx.signing_key)

    # -- read ------------------------------------------------------------------------

    def get(self, work_id: str) -> UnitRow | None:
        ids.validate(work_id)
        replaced: str | None = None
        for _ in range(_READS_PAST_A_NEW_CHECKPOINT):
            with self._ctx.db.read() as conn:
                row = conn.execute("SELECT * FROM units WHERE id = ?", (work_id,)).fetchone()
            if row is None:
                return None
            found = UnitRow.from_sql(row)
            try:
                return self._ctx.checked(found)
            except LedgerCorrupt:
                # A newer checkpoint may have been saved between the read and the load
                # of this one's file, which its save then removed: read the row again.
                # The same file missing twice is a value that is gone.
                if found.checkpoint_file is None or found.checkpoint_file == replaced:
                    raise
                replaced = found.checkpoint_file
        raise LedgerError(  # a moment's failure, not a lost value
            f"unit {work_id}: a newer checkpoint was saved during each of "
            f"{_READS_PAST_A_NEW_CHECKPOINT} reads of it; read it again"
        )

    def require(self, work_id: str) -> UnitRow:
        """Like ``get``, but an ID the ledger never saw (or has forgotten) raises UnknownWork."""
        row = self.get(work_id)
        if row is None:
            raise UnknownWork(f"the ledger has no unit {work_id}")
        return row

    def list(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        limit: int | None = None,
        ended_after: float | None = None,
        on_unreadable: Callable[[Unreadable], None] | None = None,
    ) -> builtins.list[UnitRow]:
        """Units oldest first. ``status="expired"`` lists expired units; a real status
        lists units that have it and are not expired (their status reads ``expired``).
        ``ended_after`` keeps units that ended at or after that time. Pages, totals
        and text search: ``Listing``.

        A row that cannot be read (``unreadable``) is left out, and the others
        listed: each left out goes to ``on_unreadable``, by default a warning
        logged once per process naming it and how to repair it."""
        shown = None if status is None else str(getattr(status, "value", status))
        found = Filter(status=shown, kind=kind, parent=parent, ended_after=ended_after)
        return self._listing.page(found, limit=limit, on_unreadable=on_unreadable, listed=False)

    def records(self, rows: Iterable[UnitRow]) -> builtins.list[WorkRecord]:
        """The rows as records, each ``acknowledged`` as its notice is in the outbox.

        A row does not hold it: a record read from the ledger would otherwise
        say "not acknowledged" of every notice a consumer took long ago.
        """
        rows = list(rows)
        taken = self._outbox.acknowledged_among(r.id for r in rows if is_terminal(r.status))
        return [r.to_record(acknowledged=r.id in taken) for r in rows]

    def record(self, row: UnitRow) -> WorkRecord:
        """One row as a record (see ``records``)."""
        (record,) = self.records([row])
        return record

    def load_spec(self, work_id: str) -> object:
        """The unit's spec, verified (LedgerTampered) before anything in it is loaded."""
        row = self.require(work_id)
        if row.spec is None:
            if not row.expired:
                raise UnknownWork(
                    f"{work_id} cannot resume, and started when it was submitted: its spec "
                    f"was not kept"
                )
            raise UnknownWork(f"{work_id} has expired; its spec is no longer kept")
        stored = self._ctx.large.load(row.spec, purpose="spec", work_id=work_id)
        return values.decode_spec(stored, work_id=work_id, key=self._ctx.signing_key)

    def load_result(self, work_id: str) -> Any:
        """The stored result (None when there is none); a pickle is verified first."""
        row = self.require(work_id)
        if row.result is None:
            return None
        return values.decode_result(row.result, work_id=work_id, key=self._ctx.signing_key)

    def retried_by(self, work_id: str) -> str | None:
        """The unit ``retry(work_id)`` started (its ``retry_of`` is ``work_id``), if any."""
        ids.validate(work_id)
        with self._ctx.db.read() as conn:
            row = conn.execute("SELECT id FROM units WHERE retry_of = ?", (work_id,)).fetchone()
        return None if row is None else str(row["id"])

    def output_path_of(self, work_id: str) -> str:
        """Where the unit's output file lives in this state dir."""
        return self._ctx.output_path_of(work_id)

    def save_output_offset(self, work_id: str, offset: int) -> None:
        """Keep where the unit's reader stopped (its record is leaving memory)."""
        self.save_output_offsets([(work_id, offset)])

    def save_output_offsets(self, offsets: Iterable[tuple[str, int]]) -> None:
        """``save_output_offset`` for several units, in one transaction (a supervisor's stop)."""
        items = [(offset, ids.validate(work_id)) for work_id, offset in offsets]
        with self._ctx.db.write(durable=False) as conn:
            for item in items:
                conn.execute("UPDATE units SET output_offset = ? WHERE id = ?", item)


def _check_new(new: NewUnit) -> str:
    """``new``'s spec hash, once its IDs and its text columns are ones the ledger keeps."""
    ids.validate(new.id)
    if new.parent is not None:
        ids.validate(new.parent)
    if new.session is not None:
        sessions.validate(new.session)
    for name in ("kind", "description", "key", "output_path"):
        text = getattr(new, name)
        if not isinstance(text, str):
            continue
        if not _is_utf8(text):
            shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise SpecError(
                f"the {name} '{shown}' holds bytes that are not UTF-8; the ledger keeps it "
                f"as text, so give it as text"
            )
        if "\x00" in text:
            # PostgreSQL's text cannot hold one, and one ledger must not take what
            # the other refuses (nor fail the commit of the submits beside it).
            raise SpecError(
                f"the {name} {text!r} holds a NUL character, which the ledger cannot "
                f"keep as text; leave it out"
            )
    # A policy beyond the default is part of what was asked for; the default is
    # left out, so units submitted before policies existed keep their hash.
    policy = new.sandbox
    extra = b"" if policy is None or policy.is_default else orjson.dumps(policy.to_json())
    return values.spec_hash(new.kind, new.spec, extra)


def _about(unknown: CommitUnknown, work_id: str) -> str:
    """``unknown``'s message, as one unit of a group hears it."""
    return (
        f"{unknown}; this submit's unit is {work_id}: look it up (get) to learn whether it exists"
    )


def _is_utf8(text: str) -> bool:
    # A str holds non-UTF-8 bytes as lone surrogates (os.fsdecode, sys.argv).
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
