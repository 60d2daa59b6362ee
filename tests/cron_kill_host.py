"""A supervisor process the schedule crash test SIGKILLs just after a due time.

Usage: python -m tests.cron_kill_host STATE [LEDGER_URL]. Declares ``everysec``
(a shell ``true`` every second, ``catch_up="skip"``) at each start, as a
program would, ticks every 5 ms so a firing follows its due time closely,
prints ``ready``, and waits to be killed.
"""

from __future__ import annotations

import sys
import threading

import workunits as wu

CRON = "* * * * * *"  # every second (the sixth field is seconds)


def main(state: str, url: str | None) -> None:
    with wu.Supervisor(state, ledger=url, tick_interval=0.005, session_lease=1.0) as sup:
        sup.schedule("everysec", CRON, "shell", "true", catch_up="skip")
        print("ready", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
