"""A supervisor process the attempt tests SIGKILL: its unit's attempt is lost with it.

Usage: python -m tests.attempt_host STATE [retry]
Submits ``deploy_jobs.await_approval`` (with ``retry``: one that fails its
first two attempts, under a retry policy) under one key (a restart finds the same
unit, resumed), prints ``{"id", "attempt"}`` once that attempt has checkpointed
and waits for its approval, then waits to be killed.
"""

from __future__ import annotations

import json
import sys
import threading

import orjson

import workunits as wu
from tests.deploy_jobs import await_approval, fail_twice_then_await_approval


def main(state: str, mode: str) -> None:
    with wu.Supervisor(state) as sup, wu.connect(state) as client:
        if mode == "retry":
            retry = wu.Retry(max_attempts=5, initial=0.01, jitter=False)
            unit = sup.agent(fail_twice_then_await_approval, key="approval", retry=retry)
        else:
            unit = sup.agent(await_approval, key="approval")
        stop = threading.Event()
        while not stop.wait(0.01):  # a bounded poll of the ledger, as a watcher would
            record = sup.get(unit.id)
            saved = client.row(unit.id).checkpoint
            if (
                saved is not None
                and record.attempt in orjson.loads(saved)["attempts"]
                and record.progress_message == "waiting for approval"
            ):
                break
        print(json.dumps({"id": unit.id, "attempt": record.attempt}), flush=True)
        stop.wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "plain")
