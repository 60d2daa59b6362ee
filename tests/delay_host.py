"""A supervisor process for the not_before tests: submit a unit delayed by an hour, report
its ID, wait. Usage: python -m tests.delay_host STATE. The test SIGKILLs it."""

from __future__ import annotations

import json
import sys
import threading

import workunits as wu


def main(state: str) -> None:
    with wu.Supervisor(state) as sup:
        unit = sup.shell("echo on time", not_before=3600, key="later")
        print(json.dumps({"id": unit.id, "not_before": sup.get(unit.id).not_before}), flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
