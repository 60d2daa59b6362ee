"""A stand-in for the supervisor's half of the ledger contract, driven by hand.

Client and CLI tests use it to move units through their lifecycle exactly
when a test says so, with no processes: it adopts pending rows, writes
output files and transcripts, applies requests and makes terminal writes the
way a supervisor does (drain the output into the tail, remove the file, write
the row and its outbox notice in one transaction).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import orjson

from workunits._core import ids
from workunits._core.record import TAIL_BYTES
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger import NO_RESULT, Ledger, LedgerRequest, SupervisorLock, UnitRow

SESSION = "s00000001"


class FakeSupervisor:
    """Runs in the test's thread; every method is one step a supervisor would take."""

    def __init__(self, state_dir: Path, *, expire_after: float = 7 * 24 * 3600.0) -> None:
        self.ledger = Ledger(state_dir, expire_after=expire_after)
        self.state_dir = self.ledger.state_dir
        self.session: str | None = None
        self._lock = SupervisorLock(self.state_dir)

    def close(self) -> None:
        if self.session is not None:
            self.ledger.sessions.close(self.session)
        self._lock.release()
        self.ledger.close()

    def open_session(self) -> str:
        """Look like a live supervisor to ``Client.supervisor_running``: hold its lock."""
        self._lock.acquire()
        self.session = ids.mint("s")
        self.ledger.sessions.open(self.session, os.getpid())
        return self.session

    def die(self) -> None:
        """What a SIGKILL leaves: the lock is free, the session row still open."""
        self._lock.release()

    def row(self, work_id: str) -> UnitRow:
        return self.ledger.units.require(work_id)

    def start(self, work_id: str, *, progress: float | None = None, message: str = "") -> None:
        """``pending -> running``; creates the output file (an agent's links its transcript)."""
        row = self.row(work_id)
        assert row.output_path is not None
        out = Path(row.output_path)
        out.parent.mkdir(mode=0o700, exist_ok=True)
        if row.kind == "agent":
            transcript = self.transcript(work_id)
            transcript.parent.mkdir(mode=0o700, exist_ok=True)
            transcript.touch(mode=0o600)
            out.hardlink_to(transcript)  # as the supervisor links an agent's output
            self.event(work_id, "start", id=work_id, attempt=row.attempt, pid=os.getpid())
        else:
            out.touch(mode=0o600)
        record = dataclasses.replace(
            row.to_record(),
            status=Status.RUNNING,
            started_at=row.created_at,
            pid=os.getpid(),
            progress=progress,
            progress_message=message,
        )
        assert self.ledger.attempts.write(record, attempt=row.attempt, session=self.session)

    def progress(self, work_id: str, fraction: float, message: str) -> None:
        row = self.row(work_id)
        assert (
            self.ledger.attempts.write_progress_batch([(work_id, row.attempt, fraction, message)])
            == 1
        )

    def transcript(self, work_id: str) -> Path:
        return self.state_dir / "transcripts" / f"{work_id}.jsonl"

    def output(self, work_id: str, data: bytes) -> None:
        """Append to a running shell unit's output file."""
        path = self.row(work_id).output_path
        assert path is not None
        with open(path, "ab") as f:
            f.write(data)

    def event(self, work_id: str, type_: str, **fields: Any) -> None:
        """Append one transcript event, as an agent's process would."""
        with self.transcript(work_id).open("ab") as f:
            f.write(orjson.dumps({"seq": 0, "ts": 0.0, "type": type_, **fields}) + b"\n")

    def end(
        self,
        work_id: str,
        status: Status,
        *,
        value: object = NO_RESULT,
        **fields: Any,
    ) -> None:
        """The terminal transition: drain, remove the output file, write row and notice."""
        row = self.row(work_id)
        size, tail = 0, b""
        if row.output_path is not None and os.path.lexists(row.output_path):
            with open(row.output_path, "rb") as f:
                data = f.read()
            size, tail = len(data), data[-TAIL_BYTES:]
            os.unlink(row.output_path)
        record = dataclasses.replace(
            row.to_record(),
            status=status,
            output_bytes=size,
            output_tail=tail,
            pid=None,
            **fields,
        )
        assert self.ledger.attempts.write(record, attempt=row.attempt, result=value)

    def complete(self, work_id: str, value: object = NO_RESULT) -> None:
        exit_code = 0 if self.row(work_id).kind == "shell" else None
        self.end(work_id, Status.COMPLETED, value=value, exit_code=exit_code)

    def apply_requests(self) -> list[LedgerRequest]:
        """Take and apply every open request, as a supervisor tick does."""
        taken = self.ledger.requests.take(100, session=self.session)
        for request in taken:
            row = self.row(request.target)
            changed = False
            if request.verb in ("cancel", "kill") and not is_terminal(row.status):
                reason = Reason.CANCELLED if request.verb == "cancel" else Reason.KILLED
                self.end(request.target, Status.KILLED, reason=reason)
                changed = True
            elif request.verb in ("retain", "release"):
                step = 1 if request.verb == "retain" else -1
                retain = max(0, row.retain + step)
                self.ledger.attempts.write(request.target, attempt=row.attempt, retain=retain)
                changed = True
            status = self.row(request.target).status.value
            self.ledger.requests.finish(request.seq, {"changed": changed, "status": status})
        return taken
