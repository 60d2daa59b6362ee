"""A supervisor process on a PostgreSQL ledger that a test SIGKILLs, leaving its units.

Usage: python -m tests.pg_host STATE URL. Submits ``deploy_jobs.await_approval``
under the key ``approval`` (a session lease of 1 s, so another supervisor
takes the session over soon after the kill), prints ``{"id", "session"}``
once that unit waits for its approval, then waits to be killed.
"""

from __future__ import annotations

import json
import sys
import threading

import workunits as wu
from tests.deploy_jobs import await_approval


def main(state: str, url: str) -> None:
    with wu.Supervisor(state, ledger=url, session_lease=1.0) as sup:
        unit = sup.agent(await_approval, key="approval")
        stop = threading.Event()
        while not stop.wait(0.01):  # a bounded poll, as a watcher would
            if sup.get(unit.id).progress_message == "waiting for approval":
                break
        print(json.dumps({"id": unit.id, "session": sup.session}), flush=True)
        stop.wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
