"""``Ledger``: the durable store of work units, in ``<state_dir>/ledger.db`` or PostgreSQL.

The embedded default is SQLite in the state dir. ``ledger="postgresql://..."``
keeps the ledger in PostgreSQL instead (``postgres``), while the state dir
keeps what is local: output files, transcripts, the signing key, the lock.
Both backends sit behind one seam (``backend``); every method here runs the
same on either.

Safe to use from several processes at once (SQLite WAL, ``BEGIN IMMEDIATE``
on every write, a busy timeout; in PostgreSQL an advisory write lock) and
from several threads of one process. Each process opens its own ``Ledger``.

Durability: submits, terminal writes, checkpoints, requests and session
open/close are fully synced (``synchronous=FULL``); grouped non-terminal
transitions, progress and delivery marks use NORMAL. A killed process loses
no committed transaction either way; a power cut or OS crash may lose NORMAL
commits made since the last fully synced one -- WAL keeps commits in order,
so each fully synced commit makes every earlier one durable too.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from workunits._core import ids
from workunits._core.clock import Clock, SystemClock
from workunits._core.errors import (
    IdempotencyConflict,
    InvalidTransition,
    LedgerCorrupt,
    LedgerError,
    LedgerTampered,
    NoLedger,
    SpecError,
    StaleAttempt,
    UnknownWork,
    UnstorableValue,
    WorkunitsError,
)
from workunits._core.record import Notification, WorkRecord
from workunits._core.retry import Attempt
from workunits._core.schedule import ScheduleFiring, ScheduleInfo
from workunits._core.seconds import seconds_or_none
from workunits._core.status import Status, is_terminal
from workunits._ledger import (
    attempts,
    claims,
    largevalues,
    listing,
    outbox,
    requests,
    retains,
    retention,
    schedules,
    secretfile,
    sessions,
    signals,
    statedir,
    submits,
    unreadable,
    values,
    valuestore,
    writes,
)
from workunits._ledger.backend import Database as Backend
from workunits._ledger.backend import is_url
from workunits._ledger.fence import FencedDatabase
from workunits._ledger.polls import Polls
from workunits._ledger.postgres.valuestore import DatabaseValueStore
from workunits._ledger.requests import LedgerRequest
from workunits._ledger.rows import IN_TERMINAL, TERMINAL, NewUnit, UnitRow
from workunits._ledger.sessions import Session
from workunits._ledger.signals import StoredSignal
from workunits._ledger.sqlite import backup as backup_mod
from workunits._ledger.sqlite.db import DB_FILE, SqliteDatabase
from workunits._ledger.submit_group import SubmitGroup
from workunits._ledger.unreadable import Unreadable
from workunits._ledger.writes import NO_RESULT, Write, WriteOutcome
from workunits._util import outputfile, procid, strictjson

DEFAULT_EXPIRE_AFTER = 7 * 24 * 3600.0
DEFAULT_BUSY_TIMEOUT = 10.0


class Ledger:
    """The ledger of one state dir. Every method runs in the calling thread."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        expire_after: float = DEFAULT_EXPIRE_AFTER,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        sync: str = "full",
        verify: bool = False,
        large_value: int = valuestore.LARGE_VALUE,
        ledger: str | None = None,
        secret: secretfile.SharedSecret | None = None,
        idle_limit: float | None = None,
        _readonly: bool = False,
    ) -> None:
        """``sync="normal"`` trades power-cut durability for latency (see ``sqlite.db``).

        ``verify=True`` checks the whole file (``PRAGMA quick_check``) before
        anything is written: LedgerCorrupt for a damaged one. A supervisor does.
        ``ledger``, a ``postgresql://`` URL, keeps the ledger there instead of
        in the state dir (the ``[postgres]`` extra). ``secret`` (a shared secret
        file, ``secretfile``) signs and verifies stored values in place of the
        state dir's own key: what every host on one shared ledger needs.
        ``idle_limit``: how long
        the server lets one of its connections sit idle inside a transaction
        before ending it (default half ``busy_timeout``; see ``postgres``).
        """
        # open_existing has checked a read-only state dir already; a writer checks here.
        self.state_dir = Path(state_dir) if _readonly else statedir.prepare(state_dir)
        self._clock = clock or SystemClock()
        self._expire_after = expire_after
        self._db: Backend
        if ledger is not None:
            self._db = _open_postgres(
                ledger, busy_timeout=busy_timeout, sync=sync, idle_limit=idle_limit
            )
        else:
            _refuse_an_emptied_ledger(self.state_dir)
            self._db = SqliteDatabase(
                self.state_dir,
                busy_timeout=busy_timeout,
                sync=sync,
                readonly=_readonly,
                verify=verify,
            )
        try:
            self._key: bytes | None = (
                secret.spec_key
                if secret is not None
                else values.load_key(self.state_dir)
                if _readonly
                else values.load_or_create_key(self.state_dir)
            )
        except BaseException:
            self._db.close()
            raise
        self._shared = not isinstance(self._db, SqliteDatabase)  # before a fence wraps it
        self._polls = Polls(self._db)
        self._url = ledger
        self._secret = secret
        # On PostgreSQL every host must read what any host stored: the database keeps it.
        store: valuestore.ValueStore = (
            valuestore.FileValueStore(self.state_dir)
            if isinstance(self._db, SqliteDatabase)
            else DatabaseValueStore(self._db)
        )
        self._large = largevalues.LargeValues(store, self._key, large_value)
        # Submits from this process's threads share commits (``submit_group``).
        self._submits = SubmitGroup(self.submit_many)

    @classmethod
    def open_existing(
        cls,
        state_dir: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        secret: secretfile.SharedSecret | None = None,
    ) -> Ledger:
        """Open the ledger of ``state_dir``; NoLedger when there is none (nothing is created).

        For readers such as the CLI's ``ls``: looking must not leave an empty
        ledger (or state dir) behind in a directory given by mistake. In a state
        dir this process may not write in, the ledger opens read-only (``readonly``):
        reads work, and every write raises StateDirError.
        """
        checked, writable = statedir.open_for_reading(state_dir)
        path = checked / DB_FILE
        if not path.is_file():
            raise NoLedger(
                f"{checked} holds no workunits ledger (no {DB_FILE}); check the state "
                f"dir, or start one with `workunits serve --state {checked}`"
            )
        return cls(
            checked, clock=clock, busy_timeout=busy_timeout, secret=secret, _readonly=not writable
        )

    @classmethod
    def open(
        cls,
        state_dir: str | os.PathLike[str],
        *,
        create: bool,
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        ledger: str | None = None,
        secret: secretfile.SharedSecret | None = None,
    ) -> Ledger:
        """``open_existing``, or with ``create`` a new ledger where there is none.

        What a client opens: read-only when the state dir is read-only here.
        With ``ledger`` (a PostgreSQL URL) the ledger is there, created or
        migrated as a supervisor would, and the state dir is prepared for the key.
        """
        if ledger is not None:
            return cls(
                state_dir, clock=clock, busy_timeout=busy_timeout, ledger=ledger, secret=secret
            )
        try:
            return cls.open_existing(
                state_dir, clock=clock, busy_timeout=busy_timeout, secret=secret
            )
        except NoLedger:
            if not create:
                raise
        return cls(state_dir, clock=clock, busy_timeout=busy_timeout, secret=secret)

    def sibling(self, *, clock: Clock | None = None) -> Ledger:
        """Another connection to this same ledger (its file or its URL, its secret),
        for a thread that must not queue behind this one's connection."""
        return Ledger.open(
            self.state_dir,
            create=False,
            clock=clock or self._clock,
            ledger=self._url,
            secret=self._secret,
        )

    @property
    def _signing_key(self) -> bytes:
        if self._key is None:  # only a read-only ledger, before any writer made its key
            raise LedgerError(
                f"{self.state_dir} has no {values.KEY_FILE} yet, so no signed value in its "
                f"ledger can be verified here"
            )
        return self._key

    @property
    def readonly(self) -> bool:
        """True when the state dir is read-only here: reads work, writes raise StateDirError."""
        return self._db.readonly

    @property
    def path(self) -> Path:
        """The SQLite file; a PostgreSQL ledger has none (LedgerError: see ``where``)."""
        plain = self._db.inner if isinstance(self._db, FencedDatabase) else self._db
        if not isinstance(plain, SqliteDatabase):
            raise LedgerError(f"the ledger {self._db.where} is in PostgreSQL, not in a file")
        return plain.path

    @property
    def shared(self) -> bool:
        """True for a PostgreSQL ledger, which hosts other than this one may share."""
        return self._shared

    @property
    def where(self) -> str:
        """The ledger as messages name it: its file, or its URL without the password."""
        return self._db.where

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- submit and read ---------------------------------------------------------

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
            return self._submits.submit(new)
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
        is in the ledger. For a supervisor's group commit of the submits that
        arrived together (``supervisor.actor.submits``).
        """
        prepared: builtins.list[tuple[NewUnit, str] | WorkunitsError] = []
        for new in batch:
            try:
                prepared.append((self._kept(new), self._check_new(new)))
            except WorkunitsError as exc:
                prepared.append(exc)
        ready = [p for p in prepared if not isinstance(p, WorkunitsError)]
        pending = [new.id for new, _ in ready if new.started_at is None]
        woken = None if not (wake and pending) else f"unit:{pending[0]}"
        try:
            with self._db.write(durable=True, wake=woken) as conn:
                inserted = [submits.insert(conn, new, digest) for new, digest in ready]
        except BaseException:
            self._large.delete(new.spec.file for new, _ in ready)
            raise
        # A key that found its unit (or conflicted) inserted nothing: its file is no one's.
        self._large.delete(
            new.spec.file
            for (new, _), a in zip(ready, inserted, strict=True)
            if isinstance(a, IdempotencyConflict) or not a[1]
        )
        answers = iter(inserted)
        out: builtins.list[tuple[UnitRow, bool] | WorkunitsError] = []
        for p in prepared:
            if isinstance(p, WorkunitsError):
                out.append(p)
                continue
            a = next(answers)
            if isinstance(a, IdempotencyConflict) or a[1]:
                out.append(a)
                continue
            try:  # the existing unit, as any read shows it (its spec's seal checked)
                out.append((self._checked(a[0]), False))
            except WorkunitsError as exc:
                out.append(exc)
        return out

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
            spec = self._large.offload(new.spec, purpose="spec", work_id=new.id, durable=True)
        return new if spec is new.spec else dataclasses.replace(new, spec=spec)

    @staticmethod
    def _check_new(new: NewUnit) -> str:
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
        return values.spec_hash(new.kind, new.spec)

    def get(self, work_id: str) -> UnitRow | None:
        ids.validate(work_id)
        with self._db.read() as conn:
            row = conn.execute("SELECT * FROM units WHERE id = ?", (work_id,)).fetchone()
        return None if row is None else self._checked(UnitRow.from_sql(row))

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
        ``ended_after`` keeps units that ended at or after that time.

        A row that cannot be read (``unreadable``) is left out, and the others
        listed: each left out goes to ``on_unreadable``, by default a warning
        logged once per process naming it and how to repair it."""
        shown = None if status is None else str(getattr(status, "value", status))
        found = listing.Filter(status=shown, kind=kind, parent=parent, ended_after=ended_after)
        return self.page(found, limit=limit, on_unreadable=on_unreadable)

    def page(
        self,
        found: listing.Filter,
        *,
        limit: int | None,
        after: listing.Mark | None = None,
        newest: bool = False,
        exclude: Sequence[str] = (),
        only: Sequence[str] | None = None,
        on_unreadable: Callable[[Unreadable], None] | None = None,
    ) -> builtins.list[UnitRow]:
        """A page of the units ``found`` matches, after ``after`` (``listing``)."""
        rows = listing.page(
            self._db,
            found.checked(),
            limit=limit,
            after=after,
            newest=newest,
            exclude=exclude,
            only=only,
        )
        listed: builtins.list[UnitRow] = []
        for row in self._checked_each(unreadable.decode(row) for row in rows):
            if isinstance(row, UnitRow):
                listed.append(row)
            elif on_unreadable is not None:
                on_unreadable(row)
            else:
                unreadable.report(row, logging.WARNING, "is left out of the list")
        return listed

    def mark_of(self, work_id: str) -> listing.Mark:
        """Where the unit stands in the order of pages; UnknownWork if the ledger has none."""
        mark = listing.mark_of(self._db, work_id)
        if mark is None:
            raise UnknownWork(f"the ledger has no unit {work_id}")
        return mark

    def total(self, found: listing.Filter) -> listing.Total:
        """How many units ``found`` matches (exact, or at least that many)."""
        return listing.total(self._db, found.checked())

    def counts(self) -> dict[tuple[str, str], int]:
        """Units by (kind, shown status), from counts kept by the ledger's triggers."""
        return listing.counts(self._db)

    def waiting_notices(self, limit: int = 500) -> builtins.list[dict[str, object]]:
        """Notices not yet acknowledged, for a view (nothing is claimed)."""
        return listing.waiting_notices(self._db, limit)

    def signals_of(self, work_id: str, limit: int = 200) -> builtins.list[dict[str, object]]:
        """The signals sent to the unit, taken or not."""
        return listing.signals_of(self._db, work_id, limit)

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
        stored = self._large.load(row.spec, purpose="spec", work_id=work_id)
        return values.decode_spec(stored, work_id=work_id, key=self._signing_key)

    def load_result(self, work_id: str) -> Any:
        """The stored result (None when there is none); a pickle is verified first."""
        row = self.require(work_id)
        if row.result is None:
            return None
        return values.decode_result(row.result, work_id=work_id, key=self._signing_key)

    def encode_spec(self, spec: object, work_id: str) -> values.Stored:
        """``spec`` signed with this state dir's key, for a :class:`NewUnit`."""
        return values.encode_spec(spec, work_id=work_id, key=self._signing_key)

    # -- fenced writes -------------------------------------------------------------

    def write(
        self,
        target: WorkRecord | str,
        *,
        attempt: int,
        result: object = NO_RESULT,
        json_result: bool = False,
        notification: Notification | None = None,
        **fields: object,
    ) -> bool:
        """Write a record's columns (or ``fields`` of the unit ``target``), fenced by attempt.

        Returns False when the write was ignored because it would leave a
        terminal status (a normal race). Raises StaleAttempt when ``attempt``
        is not the unit's current one. A write that makes the unit terminal
        commits its outbox notice in the same, fully synced transaction.
        """
        w = Write(target, attempt, fields, result, json_result, notification)
        ((outcome, current),) = self._apply([w])
        if outcome is WriteOutcome.STALE:
            raise StaleAttempt(_id_of(target), attempt, current)
        return outcome is WriteOutcome.WRITTEN

    def write_many(self, batch: Iterable[Write]) -> builtins.list[WriteOutcome]:
        """Apply several writes in one transaction (one commit, one sync for the group).

        Each write's outcome is in the list; a stale or ignored one does not
        stop the others. The group is fully synced when any write in it makes
        a unit terminal or stores a result, else NORMAL.
        """
        return [outcome for outcome, _ in self._apply(builtins.list(batch))]

    def _apply(self, batch: builtins.list[Write]) -> builtins.list[tuple[WriteOutcome, int]]:
        prepared = [writes.prepare(w, self._offload_result(w), self._seal_cause(w)) for w in batch]
        durable = any(
            "result" in p.columns or (p.status is not None and is_terminal(p.status))
            for p in prepared
        )
        now = self._clock.now()
        with self._db.write(durable=durable) as conn:
            return [
                writes.apply(conn, p, now=now, expire_after=self._expire_after) for p in prepared
            ]

    def _offload_result(self, w: Write) -> values.Stored | None:
        stored = self._encode_result(w)
        if stored is None:
            return None
        return self._large.offload(stored, purpose="result", work_id=_id_of(w.target), durable=True)

    def _encode_result(self, w: Write) -> values.Stored | None:
        """The result to store: a value given to write(), or the bytes a record carries."""
        work_id = _id_of(w.target)
        if w.result is not NO_RESULT:
            return values.encode_result(
                w.result, work_id=work_id, key=self._signing_key, json_only=w.json_result
            )
        if isinstance(w.target, WorkRecord) and w.target.result is not None:
            fmt = w.target.result_format
            if fmt is None:
                raise SpecError(f"{work_id}: the record has a result but no result_format")
            return values.seal(
                w.target.result, fmt, purpose="result", work_id=work_id, key=self._signing_key
            )
        return None

    def _seal_cause(self, w: Write) -> values.Stored | None:
        if isinstance(w.target, WorkRecord) and w.target.cause is not None:
            return values.seal(
                w.target.cause,
                "pickle",
                purpose="cause",
                work_id=w.target.id,
                key=self._signing_key,
            )
        return None

    def _checked(self, row: UnitRow) -> UnitRow:
        """``row``, once its pickled result and cause verify (LedgerTampered otherwise).

        Every row the Ledger hands out passes here, so the bytes a record
        carries onward (``to_record``) are the ones this state dir signed.
        """
        if row.result is not None and row.result.file is not None:
            result = self._large.load(row.result, purpose="result", work_id=row.id)
            row = dataclasses.replace(row, result=result)
        try:
            row = self._checked_checkpoint(row)
        except (LedgerCorrupt, LedgerTampered):
            if not is_terminal(row.status):
                raise  # what a later attempt would resume from: refused
            # An ended unit's checkpoint is moot: one that is gone or fails its check
            # is left out, and the rest of the record reads as it is.
            row = dataclasses.replace(row, checkpoint=None, checkpoint_file=None)
        for purpose, stored in (("result", row.result), ("cause", row.cause)):
            if stored is not None:
                values.verify(stored, purpose=purpose, work_id=row.id, key=self._signing_key)
        # The output file's path follows from this state dir and the (validated)
        # ID, never from the row: a state dir moved or restored from a backup
        # keeps working, and a row cannot point a reader at another file.
        if row.output_path is not None:
            own = self.output_path_of(row.id)
            if row.output_path != own:
                row = dataclasses.replace(row, output_path=own)
        return row

    def _checked_each(
        self, rows: Iterable[UnitRow | Unreadable]
    ) -> builtins.list[UnitRow | Unreadable]:
        """Each row ``_checked``; one whose stored values fail is an Unreadable, without them.

        Its lifecycle columns decoded, so its reader may still end it. A failure
        of the ledger's moment (a lost connection reading a large value) is one
        too: the reader tells them apart, and retries that one.
        """
        out: builtins.list[UnitRow | Unreadable] = []
        for found in rows:
            if isinstance(found, Unreadable):
                out.append(found)
                continue
            try:
                out.append(self._checked(found))
            except LedgerError as exc:
                out.append(unreadable.failed_check(found, exc))
        return out

    def _checked_checkpoint(self, row: UnitRow) -> UnitRow:
        """``row`` with its checkpoint loaded (a large one) and verified, as it was saved."""
        if row.checkpoint_file is not None:
            ref = values.Stored("json", b"", file=row.checkpoint_file)
            data = self._large.load(ref, purpose="checkpoint", work_id=row.id).data
            row = dataclasses.replace(row, checkpoint=data, checkpoint_file=None)
        if row.checkpoint is not None:
            checkpoint = values.Stored("json", row.checkpoint, row.checkpoint_mac)
            values.verify(checkpoint, purpose="checkpoint", work_id=row.id, key=self._signing_key)
        return row

    def output_path_of(self, work_id: str) -> str:
        """Where the unit's output file lives in this state dir."""
        return str(self.state_dir / "output" / f"{ids.validate(work_id)}.out")

    def write_progress_batch(self, items: Iterable[ProgressItem]) -> int:
        """Store ``(id, attempt, fraction, message[, at, evidence])`` items in one NORMAL
        transaction (``at``: when it was reported; ``evidence``: a JSON object).

        Items from a stale attempt, or for a unit that has ended, are dropped.
        Returns how many were written.
        """
        params = [_progress_params(*item) for item in items]
        if not params:
            return 0
        with self._db.write(durable=False) as conn:
            cursor = conn.executemany(
                "UPDATE units SET progress = ?, progress_message = ?, "  # noqa: S608
                "progress_at = coalesce(?, progress_at), progress_evidence = ? WHERE id = ? "
                f"AND attempt = ? AND status NOT IN {IN_TERMINAL}",
                [(*p, *TERMINAL) for p in params],
            )
            return cursor.rowcount

    def save_checkpoint(self, work_id: str, attempt: int, state: object) -> bool:
        """Store ``state`` (exact JSON, else UnstorableValue naming the path), fenced.

        Fully synced: a checkpoint is what a later attempt resumes from.
        Returns False when the unit has already ended (the checkpoint is moot).
        """
        ids.validate(work_id)
        return self._store_checkpoint(
            work_id, attempt, strictjson.dumps(state, f"checkpoint of {work_id}")
        )

    def save_checkpoint_encoded(
        self, work_id: str, attempt: int, data: bytes, *, consumed: Sequence[int] = ()
    ) -> bool:
        """Like ``save_checkpoint`` for JSON a unit process already encoded strictly.

        The supervisor receives checkpoints as bytes; decoding them only to
        encode them again would cost a round trip per checkpoint. The bytes
        must parse as JSON (UnstorableValue otherwise). ``consumed``: the
        signals the unit received since its last checkpoint, marked consumed in
        the same transaction (a resumed attempt will not receive them again).
        """
        ids.validate(work_id)
        if not isinstance(data, bytes):
            raise UnstorableValue(
                f"checkpoint of {work_id}: expected JSON bytes, got {type(data).__name__}"
            )
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise UnstorableValue(
                f"checkpoint of {work_id} is not valid JSON ({exc}); nothing was stored"
            ) from None
        return self._store_checkpoint(work_id, attempt, data, consumed)

    def _store_checkpoint(
        self, work_id: str, attempt: int, data: bytes, consumed: Sequence[int] = ()
    ) -> bool:
        signed = values.signed_json(data, "checkpoint", work_id, self._signing_key)
        stored = self._large.offload(signed, purpose="checkpoint", work_id=work_id, durable=True)
        with self._db.write(durable=True) as conn:
            row = conn.execute(
                "SELECT status, attempt, checkpoint_file FROM units WHERE id = ?", (work_id,)
            ).fetchone()
            if row is None:
                raise UnknownWork(f"the ledger has no unit {work_id}")
            if int(row["attempt"]) != attempt:
                raise StaleAttempt(work_id, attempt, int(row["attempt"]))
            if is_terminal(writes.status_of(row["status"], work_id)):
                ended = True
            else:
                ended = False
                conn.execute(
                    "UPDATE units SET checkpoint = ?, checkpoint_file = ?, checkpoint_mac = ? "
                    "WHERE id = ?",
                    (stored.data, stored.file, stored.mac, work_id),
                )
                if consumed:
                    signals.consume(conn, work_id, consumed, self._clock.now())
        if ended:
            if stored.file not in (None, row["checkpoint_file"]):
                self._large.delete([stored.file])  # the checkpoint is moot
            return False
        if row["checkpoint_file"] not in (None, stored.file):
            # After the commit: until then the row pointed at the old file.
            self._large.delete([row["checkpoint_file"]])
        return True

    def begin_attempt(self, work_id: str, session: str, *, expected: int | None = None) -> int:
        """Resume a ``running`` unit as its next attempt (same ID) under ``session``.

        ``expected`` is the attempt the caller saw; if another attempt began
        since, StaleAttempt. Raises InvalidTransition for a unit that is not
        running or has no attempts left (it should fail with reason ``lost``).
        """
        ids.validate(work_id)
        sessions.validate(session)
        with self._db.write(durable=True) as conn:
            row = conn.execute(
                "SELECT status, attempt, max_attempts FROM units WHERE id = ?", (work_id,)
            ).fetchone()
            if row is None:
                raise UnknownWork(f"the ledger has no unit {work_id}")
            attempt, status = int(row["attempt"]), writes.status_of(row["status"], work_id)
            if expected is not None and attempt != expected:
                raise StaleAttempt(work_id, expected, attempt)
            if status != Status.RUNNING:
                raise InvalidTransition(
                    f"{work_id} is {status.value}; only a running unit is resumed"
                )
            if attempt >= int(row["max_attempts"]):
                raise InvalidTransition(
                    f"{work_id} has used {attempt} of {row['max_attempts']} attempts; "
                    f"end it failed with reason 'lost' instead"
                )
            conn.execute(
                "UPDATE units SET attempt = ?, session = ?, pid = NULL WHERE id = ?",
                (attempt + 1, session, work_id),
            )
        return attempt + 1

    # -- retries (see ``attempts``) ---------------------------------------------------

    def schedule_retry(
        self, work_id: str, attempt: int, failed: Attempt, message: str
    ) -> tuple[Attempt, ...]:
        """``attempt`` failed; the next is due at ``failed.retry_at``. The attempts so far."""
        ids.validate(work_id)
        return attempts.schedule(self._db, work_id, attempt, failed, message)

    def begin_retry(self, work_id: str, session: str, *, expected: int) -> tuple[int, UnitRow]:
        """Start the attempt after ``expected`` of a waiting unit; its number and its row."""
        ids.validate(work_id)
        sessions.validate(session)
        attempt = attempts.begin(self._db, work_id, session, expected)
        return attempt, self.require(work_id)

    def retried_by(self, work_id: str) -> str | None:
        """The unit ``retry(work_id)`` started (its ``retry_of`` is ``work_id``), if any."""
        return attempts.retried_by(self._db, ids.validate(work_id))

    # -- retention -----------------------------------------------------------------

    def expire(self) -> int:
        """Drop spec, result, output tail, checkpoint and transcript (or kept log) of
        ended units past ``expire_at``.

        The small row stays and reads ``expired``; retained units wait. Returns
        how many units expired now.
        """
        return len(self.expire_due())

    def expire_due(self) -> builtins.list[str]:
        """``expire``, returning the IDs of the units that expired now."""
        expired, files = retention.expire(self._db, self._clock.now())
        self._drop_transcripts(expired)
        self._large.delete(files)
        if expired:
            self._db.give_back_space()
        return expired

    def expire_ended_before(self, cut: float) -> tuple[int, int]:
        """Expire what is due and every ended, unretained unit that ended at or before ``cut``.

        Returns ``(units, bytes)``: how many units expired now and how many
        bytes of stored values and transcripts they dropped.
        """
        expired, freed, files = retention.expire_ended_before(self._db, self._clock.now(), cut)
        freed += self._drop_transcripts(expired) + self._large.delete(files)
        if expired:
            self._db.give_back_space()
        return len(expired), freed

    def _drop_transcripts(self, work_ids: Iterable[str]) -> int:
        """Delete the transcripts and kept logs of expired units (after the commit);
        the bytes freed. A pointer to a caller's log goes, the caller's file stays."""
        freed = 0
        for work_id in work_ids:
            if not ids.is_valid(work_id):
                continue  # a path is never built from an unchecked value, even our own row's
            for path in outputfile.kept_paths(self.state_dir, work_id):
                try:
                    info = os.lstat(path)
                    os.unlink(path)
                except FileNotFoundError:
                    continue  # not of this kind, or already gone
                if not stat.S_ISLNK(info.st_mode):
                    freed += info.st_size
        return freed

    def gc(self, older_than: float | None = None) -> int:
        """Expire what is due, then forget units expired more than ``older_than`` s ago.

        Also drops delivered notices of forgotten units, finished requests and
        closed sessions older than that. ``older_than`` defaults to
        ``expire_after``. Returns how many unit rows were deleted; their IDs are
        unknown to the ledger afterwards.
        """
        age = seconds_or_none("older_than", older_than, zero=True, none="the ledger's expire_after")
        now = self._clock.now()
        expired, files = retention.expire(self._db, now)
        self._drop_transcripts(expired)
        self._large.delete(files)
        if age is None:
            age = self._expire_after
        forgotten = retention.forget(self._db, now - age)
        self.sweep_values()
        self._db.give_back_space()
        return forgotten

    def backup(self, dest: str | os.PathLike[str]) -> backup_mod.BackupReport:
        """Write a consistent copy of this live state dir to ``dest`` (``sqlite.backup``)."""
        plain = self._db.inner if isinstance(self._db, FencedDatabase) else self._db
        if not isinstance(plain, SqliteDatabase):
            raise LedgerError(
                f"the ledger {self._db.where} is in PostgreSQL: back it up with pg_dump (or "
                f"your server's backups), and copy the state dir's files beside it"
            )
        return backup_mod.backup(plain, self.state_dir, Path(dest))

    def sweep_values(self) -> int:
        """Delete value store files no row refers to (see ``largevalues``); the bytes freed."""
        if self.readonly:
            return 0
        with self._db.read() as conn:
            # File times are the real clock's, whatever clock this Ledger was given.
            orphans = self._large.orphans(conn, time.time())
        return self._large.delete(orphans)

    # -- the outbox ------------------------------------------------------------------

    def undelivered(
        self, parent: str | None, limit: int | None = None
    ) -> builtins.list[Notification]:
        """Notices for ``parent`` (None: the application root) not yet acknowledged."""
        return outbox.undelivered(self._db, parent, limit)

    def mark_delivered(self, work_id: str, status: Status) -> bool:
        """Acknowledge one notice, claimed or not; True only for the call that did."""
        return outbox.mark_delivered(self._db, work_id, status, self._clock.now())

    def claim_notice(
        self, parent: str | None, *, owner: str | None = None, lease: float | None = None
    ) -> outbox.Claimed | None:
        """Claim the oldest unclaimed notice of ``parent`` (see ``outbox``); None if none.

        ``owner`` defaults to this process; a claim with a ``lease`` lapses after
        it unless renewed, one without lasts as long as the owner's process.
        """
        if lease is not None:
            lease = retains.check_lease(lease)
        now = self._clock.now()
        return outbox.claim(self._db, parent, owner or procid.this_process(), now, lease)

    def release_dead_claims(self) -> int:
        """Hand back the claims of consumers that died (process gone, lease lapsed); how many."""
        return outbox.release_dead(self._db, self._clock.now())

    def ack_notice(self, work_id: str, token: str | None) -> bool:
        """Acknowledge a claimed notice (``token`` None: whoever claimed it); False if the
        claim was lost (it lapsed or was released)."""
        return outbox.ack(self._db, work_id, token, self._clock.now())

    def release_notice(self, work_id: str, token: str) -> bool:
        """Hand a claimed notice back for redelivery; False if the claim was already lost."""
        return outbox.release(self._db, work_id, token)

    def renew_claim(self, work_id: str, token: str, lease: float) -> bool:
        return outbox.renew(self._db, work_id, token, self._clock.now(), retains.check_lease(lease))

    def acknowledged_among(self, work_ids: Iterable[str]) -> set[str]:
        """Of these ended units, those whose notice is acknowledged (or already deleted)."""
        return outbox.acknowledged_among(self._db, list(work_ids))

    def records(self, rows: Iterable[UnitRow]) -> builtins.list[WorkRecord]:
        """The rows as records, each ``acknowledged`` as its notice is in the outbox.

        A row does not hold it: a record read from the ledger would otherwise
        say "not acknowledged" of every notice a consumer took long ago.
        """
        rows = builtins.list(rows)
        taken = self.acknowledged_among(r.id for r in rows if is_terminal(r.status))
        return [r.to_record(acknowledged=r.id in taken) for r in rows]

    def record(self, row: UnitRow) -> WorkRecord:
        """One row as a record (see ``records``)."""
        (record,) = self.records([row])
        return record

    def outbox_size(self) -> int:
        """Notices not yet acknowledged."""
        return outbox.counts(self._db)[1]

    def unclaimed_count(self, parent: str | None) -> int:
        """Notices of ``parent`` waiting for a consumer."""
        return outbox.unclaimed_count(self._db, parent)

    def outbox_rows(self) -> int:
        """Rows in the outbox, acknowledged or not (what ``make soak`` checks stays flat)."""
        return outbox.counts(self._db)[0]

    def drop_acknowledged(self, older_than: float) -> int:
        """Delete notices acknowledged more than ``older_than`` seconds ago."""
        return outbox.drop_acknowledged(self._db, self._clock.now() - older_than)

    # -- retains (leases) ----------------------------------------------------------------

    def retain(self, work_id: str, lease: float, *, owner: str | None = None) -> str:
        """Retain ``work_id`` for ``lease`` seconds, for this process; the lease's ID."""
        return retains.add(
            self._db, work_id, owner or procid.this_process(), self._clock.now(), lease
        )

    def renew_retain(self, lease_id: str, lease: float, *, unit: str | None = None) -> bool:
        """Renew a retain lease; False once it lapsed or was released, or (given ``unit``)
        when it is not a lease on that unit."""
        return retains.renew(self._db, lease_id, self._clock.now(), lease, unit)

    def release_retain(self, lease_id: str, *, unit: str | None = None) -> bool:
        """Release a retain lease; False once it had gone, or (given ``unit``) when it is
        not a lease on that unit."""
        return retains.release(self._db, lease_id, unit)

    def drain_commit_seconds(self) -> builtins.list[float]:
        """How long each write's COMMIT took since the last call (SQLite; empty elsewhere)."""
        kept = getattr(self._db, "commit_seconds", None)
        if kept is None:
            return []
        drained = []
        while kept:
            drained.append(kept.popleft())
        return drained

    def save_output_offset(self, work_id: str, offset: int) -> None:
        """Keep where the unit's reader stopped (its record is leaving memory)."""
        self.save_output_offsets([(work_id, offset)])

    def save_output_offsets(self, offsets: Iterable[tuple[str, int]]) -> None:
        """``save_output_offset`` for several units, in one transaction (a supervisor's stop)."""
        items = [(offset, ids.validate(work_id)) for work_id, offset in offsets]
        with self._db.write(durable=False) as conn:
            for item in items:
                conn.execute("UPDATE units SET output_offset = ? WHERE id = ?", item)

    def retained(self, units: Iterable[str] | None = None) -> set[str]:
        """The units a live lease holds (lapsed ones are dropped first)."""
        return retains.held(self._db, self._clock.now(), units)

    # -- requests from other processes -------------------------------------------------

    def add_request(self, verb: str, target: str, args: dict[str, Any] | None = None) -> int:
        return requests.add(self._db, verb, target, args, self._clock.now())

    def take_requests(
        self, limit: int, *, session: str | None = None, routed: bool = False
    ) -> builtins.list[LedgerRequest]:
        """Open requests, oldest first; ``routed``: only those ``session`` may apply
        among several supervisors (``requests.take``)."""
        return self._polls.poll(
            ("requests", limit, session, routed),
            lambda: requests.take(self._db, limit, session, self._clock.now(), routed=routed),
        )

    def finish_request(self, seq: int, result: Any = None) -> None:
        requests.finish(self._db, seq, result, self._clock.now())

    def get_request(self, seq: int) -> LedgerRequest | None:
        return requests.get(self._db, seq)

    def reopen_requests(self, current_session: str) -> int:
        return requests.reopen(self._db, sessions.validate(current_session))

    # -- signals: outside input units wait for ------------------------------------------

    def send_signal(self, work_id: str, name: str, value: Any = None) -> int | None:
        """Keep a signal for ``work_id``; its seq, or None when the unit has ended."""
        return signals.send(self._db, work_id, name, value, self._clock.now())

    def open_signals(self, work_id: str) -> builtins.list[StoredSignal]:
        """The signals ``work_id`` has not consumed, oldest first."""
        ids.validate(work_id)
        return signals.open_for(self._db, work_id)

    def signals_after(self, seq: int, limit: int = 256) -> builtins.list[StoredSignal]:
        key = ("signals", seq, limit)
        return self._polls.poll(key, lambda: signals.after(self._db, seq, limit))

    # -- schedules ---------------------------------------------------------------------

    def put_schedule(self, row: schedules.ScheduleRow) -> None:
        schedules.put(self._db, row)

    def remove_schedule(self, name: str) -> bool:
        return schedules.remove(self._db, name)

    def all_schedules(self) -> builtins.list[schedules.ScheduleRow]:
        return schedules.all_rows(self._db)

    def schedule_listing(self) -> builtins.list[ScheduleInfo]:
        """Each schedule with its next due time and latest firing, by name."""
        return schedules.listing(self._db)

    def unit_under_key(self, key: str) -> str | None:
        return schedules.unit_under(self._db, key)

    def record_firing(self, name: str, due_at: float, unit: str | None, next_at: float) -> None:
        schedules.record(
            self._db, name, due_at=due_at, unit=unit, next_at=next_at, now=self._clock.now()
        )

    def advance_schedule(self, name: str, due_at: float, next_at: float) -> bool:
        """Take one firing of a schedule, a compare-and-set on its due time (``schedules``)."""
        return schedules.advance(self._db, name, due_at, next_at)

    def schedule_firings(
        self, name: str | None = None, limit: int = 100
    ) -> builtins.list[ScheduleFiring]:
        return schedules.firings(self._db, name, limit)

    def schedule_spec(self, row: schedules.ScheduleRow) -> object:
        """The spec each firing of ``row`` starts, verified against this state dir's key."""
        return values.decode_spec(
            row.spec, work_id=_schedule_mac_id(row.name), key=self._signing_key
        )

    def encode_schedule_spec(self, spec: object, name: str) -> values.Stored:
        return values.encode_spec(spec, work_id=_schedule_mac_id(name), key=self._signing_key)

    def last_signal_seq(self) -> int:
        return signals.last_seq(self._db)

    def consume_signals(self, work_id: str, seqs: Sequence[int]) -> None:
        """Mark signals consumed without a checkpoint (the unit ended)."""
        with self._db.write(durable=False) as conn:
            signals.consume(conn, work_id, seqs, self._clock.now())

    # -- sessions ----------------------------------------------------------------------

    def open_session(self, session_id: str, pid: int, *, lease: float | None = None) -> None:
        sessions.open_session(self._db, session_id, pid, self._clock.now(), lease)

    def fence(self, session_id: str) -> None:
        """From now on every write of this Ledger checks ``session_id`` was not taken over
        (SessionLost if it was; see ``fence``). A supervisor's, once its session is open."""
        if not isinstance(self._db, FencedDatabase):
            self._db = FencedDatabase(self._db, session_id)

    def take_over(
        self, session_id: str, *, exclusive: bool, default_lease: float = sessions.DEFAULT_LEASE
    ) -> tuple[builtins.list[str], builtins.list[UnitRow | Unreadable]]:
        """Sessions whose lease lapsed, taken over by ``session_id``, and their running units
        (now ``session_id``'s, to resume or fail); see ``sessions.take_over``. A row that
        cannot be read is an Unreadable in its place (``unreadable``)."""
        won, rows = sessions.take_over(
            self._db,
            session_id,
            self._clock.now(),
            exclusive=exclusive,
            default_lease=default_lease,
        )
        return won, self._checked_each(rows)

    def claim_pending(
        self, session_id: str, free: Mapping[str, int], batch: int
    ) -> builtins.list[UnitRow | Unreadable]:
        """Claim unowned pending units for ``session_id`` (see ``claims``); a row that
        cannot be read is an Unreadable in its place (``unreadable``)."""
        sessions.validate(session_id)
        rows = self._polls.poll(
            ("claims", session_id, tuple(sorted(free.items())), batch),
            lambda: claims.claim(self._db, session_id, free, batch, row_locks=self._db.row_locks),
        )
        return self._checked_each(rows)

    def advertise(self, session_id: str, url: str) -> None:
        """Record the URL ``session_id``'s HTTP API is reached at (``serve --advertise``)."""
        sessions.advertise(self._db, session_id, url)

    def heartbeat(self, session_id: str) -> None:
        sessions.heartbeat(self._db, session_id, self._clock.now())

    def close_session(self, session_id: str) -> None:
        sessions.close_session(self._db, session_id, self._clock.now())

    def get_session(self, session_id: str) -> Session | None:
        return sessions.get(self._db, session_id)

    def live_sessions(self, stale_after: float) -> builtins.list[Session]:
        return sessions.live(self._db, self._clock.now(), stale_after)

    def units_of_dead_sessions(
        self, current_session: str, *, stale_after: float | None = None
    ) -> builtins.list[UnitRow]:
        found = sessions.units_of_dead_sessions(
            self._db, current_session, self._clock.now(), stale_after
        )
        return [self._checked(row) for row in found]


def _open_postgres(
    url: str, *, busy_timeout: float, sync: str, idle_limit: float | None
) -> Backend:
    if not is_url(url):
        raise SpecError(
            f"ledger must be a postgresql:// URL (or None for SQLite in the state dir), got {url!r}"
        )
    from workunits._ledger.postgres.db import PostgresDatabase  # noqa: PLC0415 - optional extra

    return PostgresDatabase(url, busy_timeout=busy_timeout, sync=sync, idle_limit=idle_limit)


def _refuse_an_emptied_ledger(state_dir: Path) -> None:
    """LedgerCorrupt for an empty ledger file beside the key a ledger made.

    An empty file is what a fresh ledger starts as, but the key is written
    only after the ledger is set up: with a key beside it, the file was a
    ledger once and has lost its contents. Taking it for a fresh ledger would
    forget every unit while their transcripts and key stay behind.
    """
    path = state_dir / DB_FILE
    try:
        emptied = path.lstat().st_size == 0 and (state_dir / values.KEY_FILE).exists()
    except FileNotFoundError:
        return
    if emptied:
        raise LedgerCorrupt(
            f"{path} is empty, but the key beside it says a ledger lived here: the ledger "
            f"was truncated or damaged. Restore it from a backup, or move the state dir "
            f"aside to start afresh"
        )


def _is_utf8(text: str) -> bool:
    # A str holds non-UTF-8 bytes as lone surrogates (os.fsdecode, sys.argv).
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _id_of(target: WorkRecord | str) -> str:
    return target.id if isinstance(target, WorkRecord) else target


ProgressItem = (
    tuple[str, int, float | None, str | None]
    | tuple[str, int, float | None, str | None, float | None, Mapping[str, Any] | None]
)
"""``(id, attempt, fraction, message)``, optionally with ``(at, evidence)``."""


def _progress_params(  # noqa: PLR0917 - the item's own fields
    work_id: str,
    attempt: int,
    fraction: float | None,
    message: str | None,
    at: float | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> tuple[float | None, str | None, float | None, str | None, str, int]:
    ids.validate(work_id)
    if fraction is not None and (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not 0.0 <= fraction <= 1.0
    ):
        raise UnstorableValue(f"progress of {work_id} must be a number in [0, 1], got {fraction!r}")
    if message is not None and not isinstance(message, str):
        raise SpecError(f"progress message of {work_id} must be a str, got {message!r}")
    shown = None
    if evidence is not None:
        shown = strictjson.dumps(dict(evidence), f"progress evidence of {work_id}").decode()
    return (
        None if fraction is None else float(fraction),
        message,
        at,
        shown,
        work_id,
        attempt,
    )


def _schedule_mac_id(name: str) -> str:
    # What a schedule's spec is signed as: no unit ID has a colon, so no unit's
    # spec can be swapped in for it.
    return f"schedule:{name}"
