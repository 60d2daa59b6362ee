"""A supervisor whose zygote starts while its units exhaust the descriptors.

Usage: python -m tests.faults.nofile_start_host STATE_DIR GATE LIMIT PAIRS

Lowers both limits of RLIMIT_NOFILE to LIMIT, starts a Supervisor and at once
submits PAIRS of a shell and an agent that wait for the directory GATE: they
all wait on the zygote's first start, which runs out of descriptors. Prints one
JSON line: how many units started, and the first line of each failure.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

import workunits as wu
from tests.faults.nofile_host import _settled
from workunits import Status, WorkunitsError


def held(gate: str) -> None:
    """The agents' body: wait for the gate (polling: it needs no descriptor)."""
    import threading  # noqa: PLC0415 - the body is pickled by value

    pause = threading.Event()
    while not os.path.exists(gate):
        pause.wait(0.05)


def main(state: str, gate: str, limit: int, pairs: int) -> dict[str, Any]:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    waiting = ["sh", "-c", f"while [ ! -e '{gate}' ]; do sleep 0.2; done"]
    ids: list[str] = []
    submit_errors: list[str] = []
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        for _ in range(pairs):
            try:
                ids.append(sup.shell(waiting).id)
                ids.append(sup.agent(held, gate).id)
            except WorkunitsError as exc:
                submit_errors.append(f"{type(exc).__name__}: {exc}")
        settled = [_settled(sup, work_id) for work_id in ids]
        os.mkdir(gate)
        for work_id in ids:
            sup.wait(work_id, timeout=60)
    return {
        "started": sum(r.status == Status.RUNNING for r in settled),
        "failures": [(r.error or "").strip().splitlines()[-1] for r in settled if r.error],
        "submit_errors": submit_errors,
    }


if __name__ == "__main__":
    report = main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    print(json.dumps(report), flush=True)
