"""The Ledger's side of the value store: what goes out, how it comes back verified.

``offload`` writes a value above the threshold to the store and returns the
``Stored`` the row keeps (empty bytes and a reference); ``load`` reads it back
and checks it against the HMAC its reference carries before anyone decodes
it. ``orphans`` names files no row refers to, for gc: a crash between a file
and its row's commit, or between a row's new reference and the old file's
removal, leaves one.
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Iterable

from workunits._core.errors import LedgerCorrupt, LedgerTampered
from workunits._ledger import values, valuestore
from workunits._ledger.backend import Connection
from workunits._ledger.rows import TERMINAL
from workunits._ledger.values import Stored

# A file younger than this with no row yet may belong to a submit still
# committing in another process; gc leaves it for a later run.
ORPHAN_GRACE = 3600.0

FILE_COLUMNS = ("spec_file", "result_file", "checkpoint_file")


class LargeValues:
    """Offload and load large values for one ledger. Runs in the calling thread."""

    def __init__(self, store: valuestore.ValueStore, key: bytes | None, threshold: int) -> None:
        self.store = store
        self._key = key
        self.threshold = threshold

    def offload(self, stored: Stored, *, purpose: str, work_id: str, durable: bool) -> Stored:
        """``stored`` as its row keeps it: unchanged when small, else a reference."""
        if stored.file is not None or len(stored.data) <= self.threshold:
            return stored
        name = valuestore.name_of(work_id, purpose, self._mac(purpose, work_id, stored))
        self.store.put(name, stored.data, durable=durable)
        return dataclasses.replace(stored, data=b"", file=name)

    def load(self, stored: Stored, *, purpose: str, work_id: str) -> Stored:
        """``stored`` with its bytes, verified against its reference (LedgerTampered);
        LedgerCorrupt naming the unit when they are gone."""
        if stored.file is None:
            return stored
        owner, named_purpose, mac = valuestore.parse_name(stored.file)
        if (owner, named_purpose) != (work_id, purpose):
            raise LedgerTampered(
                f"unit {work_id}: its {purpose} refers to {stored.file}, a value of another "
                f"unit or purpose; the ledger was edited"
            )
        try:
            data = self.store.get(stored.file)
        except LedgerCorrupt as exc:  # gone: say whose it was, and what to do
            raise LedgerCorrupt(
                f"unit {work_id}: its {purpose} cannot be read: {exc}. Restore the state dir "
                f"from a backup (`workunits backup` keeps the value files with an embedded "
                f"ledger; a PostgreSQL ledger, the database's own), or delete that unit's row"
            ) from None
        full = dataclasses.replace(stored, data=data, file=None)
        if not hmac.compare_digest(mac, self._mac(purpose, work_id, full)):
            raise LedgerTampered(
                f"unit {work_id}: the stored {purpose} ({stored.file}) fails its integrity check "
                f"(HMAC); it was changed outside workunits, and was not used"
            )
        return full

    def delete(self, names: Iterable[str | None]) -> int:
        """Remove these files (None and missing ones are skipped); the bytes freed."""
        return sum(self.store.delete(name) for name in names if name is not None)

    def orphans(self, conn: Connection, now: float) -> list[str]:
        """Files no row refers to whose unit has ended, is gone, or is long past its submit.

        ``conn`` is in a read (or write) transaction.
        """
        referenced: set[str] = set()
        for column in FILE_COLUMNS:
            referenced.update(
                str(r[0])
                for r in conn.execute(
                    f"SELECT {column} FROM units WHERE {column} IS NOT NULL"  # noqa: S608
                )
            )
        found: list[str] = []
        for name, mtime in self.store.names():
            if name in referenced:
                continue
            work_id = name.split(".", 1)[0]
            row = conn.execute("SELECT status FROM units WHERE id = ?", (work_id,)).fetchone()
            ended = row is not None and row[0] in TERMINAL
            if ended or now - mtime > ORPHAN_GRACE:
                found.append(name)
        return found

    def _mac(self, purpose: str, work_id: str, stored: Stored) -> bytes:
        if self._key is None:
            raise LedgerTampered(f"unit {work_id}: no key to verify its stored {purpose} with")
        return values.mac_of(
            self._key,
            purpose=f"file:{purpose}",
            work_id=work_id,
            fmt=stored.format,
            versions=stored.versions,
            data=stored.data,
        )
