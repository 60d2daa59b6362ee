"""``DatabaseValueStore``: large values in the ledger's own database, for PostgreSQL.

On a PostgreSQL ledger, supervisors and clients on several hosts each have a
state dir of their own, so a value kept in one state dir's ``values``
directory would be missing on every other host: a client's 64 MiB argument
could not start on another host's supervisor, nor its result be read back.
So the ledger keeps such values in its ``large_values`` table (migration 6 of
``postgres.schema``), one row per name, written once and deleted after the
unit's row lets go of it, exactly as ``FileValueStore`` does with files.

Why the database and not a shared directory: every host already reaches the
database, with its credentials, backups and transactions; a shared mount is
one more thing to set up, secure and keep consistent. The cost is the size:
a ``bytea`` holds up to 1 GiB, and PostgreSQL stores it TOASTed (compressed,
out of line), so the unit's row updates do not rewrite it.

Each value is still named by its HMAC (``valuestore.name_of``), so a row
changed in the table is refused (LedgerTampered) as a changed file would be.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from workunits._core.errors import LedgerCorrupt
from workunits._ledger import valuestore
from workunits._ledger.backend import Database


class DatabaseValueStore:
    """Large values in the ``large_values`` table of the ledger ``db``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def put(self, name: str, data: bytes, *, durable: bool) -> None:
        valuestore.parse_name(name)
        with self._db.write(durable=durable) as conn:
            # Same name, same bytes (the name is their HMAC): a second put changes nothing.
            conn.execute(
                "INSERT INTO large_values (name, data, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (name, data, time.time()),
            )

    def get(self, name: str) -> bytes:
        valuestore.parse_name(name)
        with self._db.read() as conn:
            row = conn.execute("SELECT data FROM large_values WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise LedgerCorrupt(
                f"the large value {name} is missing from {self._db.where} (table large_values); "
                f"it was deleted outside workunits"
            )
        return bytes(row[0])

    def delete(self, name: str) -> int:
        valuestore.parse_name(name)
        with self._db.write(durable=False) as conn:
            row = conn.execute(
                "DELETE FROM large_values WHERE name = ? RETURNING length(data)", (name,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def names(self) -> Iterator[tuple[str, float]]:
        with self._db.read() as conn:
            rows = conn.execute("SELECT name, created_at FROM large_values").fetchall()
        for name, created_at in rows:
            yield str(name), float(created_at)
