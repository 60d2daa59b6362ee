"""A supervisor process for the signal tests: submit ``gather``, report its ID, wait.

Usage: python -m tests.signal_host STATE. The test sends signals through a
client and SIGKILLs this process while the unit waits.
"""

from __future__ import annotations

import json
import sys
import threading

import workunits as wu
from tests.signal_jobs import gather


def main(state: str) -> None:
    with wu.Supervisor(state, tick_interval=0.02) as sup:
        unit = sup.agent(gather, key="gather", max_attempts=2)
        print(json.dumps({"id": unit.id}), flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
