"""``LedgerContext``: what the table objects of one ``Ledger`` share.

A ``Ledger`` hands out one object per table or concern (``ledger.units``,
``ledger.outbox``, ``ledger.schedules``, ...; see ``store``). Each holds this
context, not copies of what is in it: its connection (``db``), which the
``Ledger`` swaps for the session-fenced one once a supervisor's session is open
(``fence``), so every table object writes through the fence from then on; its
clock; the state dir's signing key; the value store of large values; how long a
write whose COMMIT lost its answer keeps reading back (``settle``); the polls
that skip reads of an idle ledger; and the check every unit row passes before
any of them hands it out (``checked``).

Every method runs in the calling thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from workunits._core import ids
from workunits._core.clock import Clock
from workunits._core.errors import LedgerCorrupt, LedgerError, LedgerTampered
from workunits._core.status import is_terminal
from workunits._ledger import settle, unreadable, values
from workunits._ledger.backend import Database
from workunits._ledger.largevalues import LargeValues
from workunits._ledger.polls import Polls
from workunits._ledger.rows import UnitRow
from workunits._ledger.unreadable import Unreadable


class LedgerContext:
    """The connection, clock, key and value store of one Ledger, and its row check."""

    def __init__(
        self,
        db: Database,
        *,
        state_dir: Path,
        clock: Clock,
        key: bytes | None,
        large: LargeValues,
        expire_after: float,
        settle_within: float = settle.SETTLE_WITHIN,
    ) -> None:
        # Swapped once for the fenced connection (``Ledger.fence``); read on every use.
        self.db = db
        self.state_dir = state_dir
        self.clock = clock
        self.large = large
        self.expire_after = expire_after
        # How long a write whose COMMIT lost its answer reads back before CommitUnknown.
        self.settle_within = settle_within
        self._key = key
        # Versions are asked of the connection as opened: the fence reads the same ones.
        self.polls = Polls(db)

    def now(self) -> float:
        return self.clock.now()

    @property
    def signing_key(self) -> bytes:
        if self._key is None:  # only a read-only ledger, before any writer made its key
            raise LedgerError(
                f"{self.state_dir} has no {values.KEY_FILE} yet, so no signed value in its "
                f"ledger can be verified here"
            )
        return self._key

    def output_path_of(self, work_id: str) -> str:
        """Where the unit's output file lives in this state dir."""
        return str(self.state_dir / "output" / f"{ids.validate(work_id)}.out")

    def checked(self, row: UnitRow) -> UnitRow:
        """``row``, once its pickled result and cause verify (LedgerTampered otherwise).

        Every row the Ledger hands out passes here, so the bytes a record
        carries onward (``to_record``) are the ones this state dir signed.
        """
        if row.result is not None and row.result.file is not None:
            result = self.large.load(row.result, purpose="result", work_id=row.id)
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
                values.verify(stored, purpose=purpose, work_id=row.id, key=self.signing_key)
        # The output file's path follows from this state dir and the (validated)
        # ID, never from the row: a state dir moved or restored from a backup
        # keeps working, and a row cannot point a reader at another file.
        if row.output_path is not None:
            own = self.output_path_of(row.id)
            if row.output_path != own:
                row = dataclasses.replace(row, output_path=own)
        return row

    def checked_each(self, rows: Iterable[UnitRow | Unreadable]) -> list[UnitRow | Unreadable]:
        """Each row ``checked``; one whose stored values fail is an Unreadable, without them.

        Its lifecycle columns decoded, so its reader may still end it. A failure
        of the ledger's moment (a lost connection reading a large value) is one
        too: the reader tells them apart, and retries that one.
        """
        out: list[UnitRow | Unreadable] = []
        for found in rows:
            if isinstance(found, Unreadable):
                out.append(found)
                continue
            try:
                out.append(self.checked(found))
            except LedgerError as exc:
                out.append(unreadable.failed_check(found, exc))
        return out

    def _checked_checkpoint(self, row: UnitRow) -> UnitRow:
        """``row`` with its checkpoint loaded (a large one) and verified, as it was saved."""
        if row.checkpoint_file is not None:
            ref = values.Stored("json", b"", file=row.checkpoint_file)
            data = self.large.load(ref, purpose="checkpoint", work_id=row.id).data
            row = dataclasses.replace(row, checkpoint=data, checkpoint_file=None)
        if row.checkpoint is not None:
            checkpoint = values.Stored("json", row.checkpoint, row.checkpoint_mac)
            values.verify(checkpoint, purpose="checkpoint", work_id=row.id, key=self.signing_key)
        return row
