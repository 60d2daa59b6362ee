"""Concurrent clients: 8 processes, 1,000 keyed submits, random cancels, one running supervisor.

Invariant 12 (idempotent submit) under contention: exactly one unit per key in
the ledger, every process told the same ID for a key. Every cancel is either
honoured (the unit ends ``killed``) or reported as too late: no request added
because the unit had ended, or the request's result says ``changed=False``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from workunits import Status, Supervisor, WorkRecord, is_terminal

PROCESSES = 8
JOBS = 125  # per process: 1,000 in all
KEYS = 300


def _run_clients(state_dir: Path) -> list[dict[str, Any]]:
    """Run the client processes to their end (killed in the finally if they hang)."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.faults.client_worker",
                str(state_dir),
                str(seed),
                str(JOBS),
                str(KEYS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for seed in range(PROCESSES)
    ]
    reports: list[dict[str, Any]] = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 0, err[-4000:]
            reports.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=30)

    return reports


def _request_times(state_dir: Path, seq: int) -> object:
    with sqlite3.connect(state_dir / "ledger.db") as db:
        row = db.execute(
            "SELECT created_at, taken_at, done_at FROM requests WHERE seq = ?", (seq,)
        ).fetchone()
    db.close()
    return row


def _one_unit_per_key(
    sup: Supervisor, state_dir: Path, reports: list[dict[str, Any]]
) -> dict[str, WorkRecord]:
    """Assert one unit per key, the same ID in every process; return every unit's end."""
    by_key: dict[str, set[str]] = defaultdict(set)
    for report in reports:
        for key, work_id in report["ids"].items():
            by_key[key].add(work_id)
    assert all(len(ids) == 1 for ids in by_key.values()), by_key
    with sqlite3.connect(state_dir / "ledger.db") as db:
        rows = db.execute("SELECT key, COUNT(*) FROM units GROUP BY key").fetchall()
    db.close()
    assert all(count == 1 for _key, count in rows), rows
    assert {k for k, _ in rows} == {f"key-{k}" for k in by_key}
    # Every unit ends; nothing is lost.
    ends = {work_id: sup.wait(work_id, timeout=60) for ids in by_key.values() for work_id in ids}
    assert all(is_terminal(r.status) for r in ends.values())
    return ends


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_eight_clients_make_exactly_one_unit_per_key(sup: Supervisor, state_dir: Path) -> None:
    reports = _run_clients(state_dir)
    _one_unit_per_key(sup, state_dir, reports)
    # Every cancel that was made got an answer.
    for report in reports:
        for cancel in report["cancels"]:
            if cancel["seq"] is not None:
                assert cancel["result"] is not None, f"cancel of {cancel['id']} never answered"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_client_cancel_is_honoured_or_reported_too_late(
    sup: Supervisor, state_dir: Path
) -> None:
    reports = _run_clients(state_dir)
    ends = _one_unit_per_key(sup, state_dir, reports)
    honoured: set[str] = set()
    answers = 0
    broken: list[str] = []
    for report in reports:
        for cancel in report["cancels"]:
            if cancel["seq"] is None:  # the unit had ended: no request was added
                continue
            record, result = ends[cancel["id"]], cancel["result"]
            answers += 1
            if result["changed"]:
                honoured.add(cancel["id"])
                if record.status != Status.KILLED:
                    broken.append(
                        f"{record.id} {record.description}: {record.status.value} "
                        f"{result} started={record.started_at} ended={record.ended_at} "
                        f"request={_request_times(state_dir, cancel['seq'])}"
                    )
    assert answers > 0
    # A cancel answered `changed` ended its unit killed: the answer comes from the
    # unit's terminal write, not from handing the Cancel to its actor.
    assert not broken, f"{len(broken)} of {answers} cancels said changed: {broken[:5]}"
    # And a killed unit was killed by some cancel that said so.
    killed = {i for i, r in ends.items() if r.status == Status.KILLED}
    assert killed <= honoured
