"""A process that freezes (SIGSTOP to itself) inside a ledger write transaction.

``python -m tests.cluster.frozen_writer URL BUSY_TIMEOUT``: prints ``in`` once
it holds the ledger's write lock, then stops, as a supervisor SIGSTOPped (or
swapped out, or paused by a debugger) in the middle of a write would.
"""

from __future__ import annotations

import os
import signal
import sys

from workunits._ledger.postgres.db import PostgresDatabase


def main() -> None:
    db = PostgresDatabase(sys.argv[1], busy_timeout=float(sys.argv[2]))
    with db.write(durable=True) as conn:
        conn.execute("SELECT 1")
        print("in", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


if __name__ == "__main__":
    main()
