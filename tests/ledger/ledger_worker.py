"""Worker processes for the ledger's multi-process tests; run as a script.

``python ledger_worker.py COMMAND STATE_DIR [ARGS]``. Each command first waits
for a line on stdin (so the test can release all workers at once), then
works and reports on stdout, one JSON document per line.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import os
import random
import signal
import sys

from workunits._core import ids
from workunits._core.status import Status
from workunits._ledger import Call, Ledger, NewUnit, SupervisorLock

# Where the test's PostgreSQL ledger is, if it has one (tests/ledger/support.py).
LEDGER_URL_ENV = "WORKUNITS_TEST_LEDGER_URL"


def say(doc: object) -> None:
    # One write() per line: a forked child and its parent may answer at once,
    # and a pipe keeps writes this small whole.
    os.write(sys.stdout.fileno(), (json.dumps(doc) + "\n").encode())


def go() -> None:
    sys.stdin.readline()


def submit(state_dir: str, keys: int, seed: int) -> None:
    """Submit keys k0..k<keys-1> in a shuffled order; report what each submit returned."""
    go()
    order = list(range(keys))
    random.Random(seed).shuffle(order)  # noqa: S311 - a reproducible order, not a secret
    with Ledger(state_dir, ledger=os.environ.get(LEDGER_URL_ENV)) as ledger:
        for i in order:
            work_id = ids.mint("a")
            spec = ledger.units.encode_spec(Call(operator.add, (i, i)), work_id)
            row, created = ledger.units.submit(NewUnit(work_id, "agent", spec, 1.0, key=f"k{i}"))
            say({"key": f"k{i}", "id": row.id, "created": created})


def crash_writer(state_dir: str) -> None:
    """Submit, start and end units forever, saying after each end; killed by the test."""
    go()
    with Ledger(state_dir, ledger=os.environ.get(LEDGER_URL_ENV)) as ledger:
        n = 0
        while True:
            work_id = ids.mint("a")
            spec = ledger.units.encode_spec(Call(operator.add, (n, n)), work_id)
            row, _ = ledger.units.submit(NewUnit(work_id, "agent", spec, 1.0))
            record = dataclasses.replace(row.to_record(), status=Status.RUNNING, started_at=2.0)
            ledger.attempts.write(record, attempt=1)
            ended = dataclasses.replace(record, status=Status.COMPLETED, ended_at=3.0)
            ledger.attempts.write(ended, attempt=1, result={"n": n})
            n += 1
            say(n)


def take(state_dir: str, session: str) -> None:
    """Take requests a few at a time until none is left; report each batch."""
    go()
    with Ledger(state_dir, ledger=os.environ.get(LEDGER_URL_ENV)) as ledger:
        while batch := ledger.requests.take(3, session=session):
            say([request.seq for request in batch])
    say("done")


def hold_lock(state_dir: str, fork: str) -> None:
    """Take the supervisor lock and hold it; with fork=fork, leave a forked child behind."""
    lock = SupervisorLock(state_dir)
    lock.acquire()
    if fork == "fork":
        child = os.fork()
        if child == 0:
            # At-fork hooks have run by now: say so, then wait to be killed.
            say({"child": os.getpid()})
            signal.pause()
            os._exit(0)
        say({"pid": os.getpid()})
    else:
        say({"pid": os.getpid()})
    if sys.stdin.readline().strip() == "release":
        lock.release()
        say("released")
        sys.stdin.readline()


def main() -> None:
    command, state_dir, *args = sys.argv[1:]
    if command == "submit":
        submit(state_dir, int(args[0]), int(args[1]))
    elif command == "crash-writer":
        crash_writer(state_dir)
    elif command == "take":
        take(state_dir, args[0])
    elif command == "hold-lock":
        hold_lock(state_dir, args[0] if args else "")
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
