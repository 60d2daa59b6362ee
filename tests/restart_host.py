"""A supervisor process for the restart tests: a permanent teammate that crashed once.

Usage: python -m tests.restart_host STATE STARTS MAX_RESTARTS. It prints the
teammate's ID once its second attempt answers, then waits: the test SIGKILLs it.
"""

from __future__ import annotations

import json
import sys
import threading

import workunits as wu
from tests.restart_jobs import Phoenix


def main(state: str, starts: str, max_restarts: int) -> None:
    with wu.Supervisor(state) as sup:
        mate = sup.teammate(Phoenix, starts, restart="permanent", max_restarts=max_restarts)
        mate.tell("crash")
        while True:  # until the second attempt answers (an ask may meet the restart)
            try:
                if mate.ask("attempt", timeout=30) == 2:
                    break
            except wu.TeammateRestarted:
                continue
        print(json.dumps({"id": mate.id}), flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
