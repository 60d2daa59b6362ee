"""A supervisor process for the schedule tests: declare a schedule, then wait.

Usage: python -m tests.schedule_host STATE. Declares ``every2s`` (a shell
``true`` every 2 seconds, ``catch_up="run-once"``) at each start, as a
program would; the test SIGKILLs this process and starts it again.
"""

from __future__ import annotations

import sys
import threading

import workunits as wu


def main(state: str) -> None:
    with wu.Supervisor(state) as sup:
        sup.schedule("every2s", "* * * * * */2", "shell", "true", catch_up="run-once")
        print("ready", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
