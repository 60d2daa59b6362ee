"""Helpers shared by the ledger tests: a manual clock, unit factories, worker processes."""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from workunits._core import ids
from workunits._core.status import Status
from workunits._ledger import Call, Ledger, NewUnit, UnitRow
from workunits._ledger.backend import Connection

WORKER = Path(__file__).with_name("ledger_worker.py")
# Where a worker finds a PostgreSQL ledger (unset: SQLite in its state dir).
LEDGER_URL_ENV = "WORKUNITS_TEST_LEDGER_URL"


class ManualClock:
    """Time that moves only when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@contextlib.contextmanager
def raw(ledger: Ledger) -> Iterator[Connection]:
    """The ledger's own connection, in a write transaction, for SQL beyond its API.

    Tests look at or tamper with rows through it on either backend; the SQL is
    the ledger modules' own dialect (``?`` placeholders, see ``backend``).
    """
    with ledger._db.write(durable=False) as conn:
        yield conn


def submit(
    ledger: Ledger,
    *,
    key: str | None = None,
    args: tuple[object, ...] = (1, 2),
    parent: str | None = None,
    max_attempts: int = 1,
    kind: str = "agent",
    created_at: float = 1.0,
) -> tuple[UnitRow, bool]:
    work_id = ids.mint("a")
    spec = ledger.units.encode_spec(Call(operator.add, args), work_id)
    new = NewUnit(
        work_id,
        kind,
        spec,
        created_at,
        parent=parent,
        key=key,
        max_attempts=max_attempts,
        resumable=max_attempts > 1,
    )
    return ledger.units.submit(new)


def new_unit(ledger: Ledger, **kwargs: object) -> UnitRow:
    row, created = submit(ledger, **kwargs)  # type: ignore[arg-type]
    assert created
    return row


def start(ledger: Ledger, work_id: str, *, session: str | None = None) -> UnitRow:
    """Move a pending unit to running, as a supervisor's start would."""
    record = ledger.units.require(work_id).to_record()
    running = dataclasses.replace(record, status=Status.RUNNING, started_at=2.0)
    assert ledger.attempts.write(running, attempt=record.attempt, session=session)
    return ledger.units.require(work_id)


def spawn(*args: str, ledger_url: str | None = None) -> subprocess.Popen[str]:
    """Run ``ledger_worker.py`` with ``args``; it reads commands on stdin, answers on stdout.

    ``ledger_url``: the worker's ledgers are in that PostgreSQL database.

    Use it in ``with``: leaving kills the worker if it still runs, reaps it and
    closes its pipes.
    """
    env = dict(os.environ)
    env.pop(LEDGER_URL_ENV, None)
    if ledger_url is not None:
        env[LEDGER_URL_ENV] = ledger_url
    return _Worker(
        [sys.executable, str(WORKER), *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


class _Worker(subprocess.Popen[str]):
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.poll() is None:
            self.kill()
        super().__exit__(exc_type, exc, tb)


@contextlib.contextmanager
def spawn_all(
    argvs: Sequence[tuple[str, ...]], ledger_url: str | None = None
) -> Iterator[list[subprocess.Popen[str]]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(spawn(*argv, ledger_url=ledger_url)) for argv in argvs]


def send(proc: subprocess.Popen[str], line: str) -> None:
    stdin: IO[str] | None = proc.stdin
    assert stdin is not None
    stdin.write(line + "\n")
    stdin.flush()


def read_line(proc: subprocess.Popen[str]) -> str:
    """The worker's next line; its stdout closing first is a failure, not a hang."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"worker {proc.args!r} exited ({proc.wait()}) without answering"
    return line.rstrip("\n")
