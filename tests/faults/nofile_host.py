"""A supervisor under a low RLIMIT_NOFILE, for the descriptor-exhaustion test.

Usage: python -m tests.faults.nofile_host STATE_DIR GATE LIMIT

Lowers both limits of RLIMIT_NOFILE to LIMIT (the Supervisor raises the soft
limit to the hard one), then starts shell units that wait for the directory GATE
until some cannot start. It checks the supervisor still answers, opens the
gate, waits for the units that did start, starts one more after the
descriptors are free, and prints one JSON line describing all of it.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from typing import Any

import workunits as wu
from workunits import Status, WorkunitsError, is_terminal

MAX_UNITS = 1_000
FAILURES_WANTED = 5


def _settled(sup: wu.Supervisor, work_id: str, timeout: float = 30.0) -> wu.WorkRecord:
    """The record once its process runs (it has a pid) or it has ended at launch.

    ``running`` is set before the launch, so the status alone does not say it started.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        record = sup.get(work_id)
        if record.pid is not None or is_terminal(record.status):
            return record
        if time.monotonic() > deadline:
            raise TimeoutError(f"{work_id} neither started nor ended after {timeout} s")
        pause.wait(0.005)


def main(state: str, gate: str, limit: int) -> dict[str, Any]:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    # Polls slowly: ~130 of these at once, each forking a sleep, are what load the
    # machine; the gate's opening is noticed within half a second all the same.
    waiting = ["sh", "-c", f"while [ ! -e '{gate}' ]; do sleep 0.5; done"]
    ids: list[str] = []
    failed = 0
    submit_errors: list[str] = []
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        for _ in range(MAX_UNITS):
            if failed + len(submit_errors) >= FAILURES_WANTED:
                break
            try:
                unit = sup.shell(waiting)
            except WorkunitsError as exc:
                submit_errors.append(f"{type(exc).__name__}: {exc}")
                continue
            ids.append(unit.id)
            if _settled(sup, unit.id).status == Status.FAILED:
                failed += 1
        # Still answering while the descriptors are exhausted.
        answered = len(sup.list(status=Status.RUNNING))
        os.mkdir(gate)  # needs no descriptor, unlike creating a file
        ends = [sup.wait(i, timeout=60) for i in ids]
        after = sup.shell(["true"])
        after_status = sup.wait(after.id, timeout=30).status.value
        assert all(is_terminal(r.status) for r in ends)
    return {
        "units": len(ids),
        "completed": sum(r.status == Status.COMPLETED for r in ends),
        "others": [
            (r.status.value, (r.error or "").splitlines()[0])
            for r in ends
            if r.status != Status.COMPLETED
        ],
        "answered_running": answered,
        "submit_errors": submit_errors,
        "after": after_status,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
