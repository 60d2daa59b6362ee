"""A supervisor process that starts one resumable agent, says its ID, and waits to be killed.

Usage: python -m tests.faults.down_host STATE LOG. The agent
(``tests.faults.jobs:count_runs``) appends its attempt number to LOG each time
its body runs.
"""

from __future__ import annotations

import json
import sys
import threading

import workunits as wu
from tests.faults.jobs import count_runs


def main(state: str, log: str) -> None:
    with wu.Supervisor(state) as sup:
        work_id = sup.agent(count_runs, log).id
        print(json.dumps({"id": work_id}), flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
