"""A supervisor process for the durability tests: start some units, report, wait.

Usage: python -m tests.durable_host STATE MODE LOG
MODE "migrate": submit the migration workflow under a key, print its ID, print
its result when done. MODE "mixed": also start a shell and a pickled agent
that cannot resume, print their IDs, and wait to be killed.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

import workunits as wu
from tests.durable_jobs import migrate, sleep_long


def main(state: str, mode: str, log: str) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with wu.Supervisor(state) as sup:
        unit = sup.workflow(migrate, log, 0.3, key="migration")
        ids = {"migration": unit.id, "recovered": sup.recovered}
        if mode == "mixed":
            ids["shell"] = sup.shell("echo before-crash; exec sleep 600").id
            ids["restart"] = sup.shell("sleep 600", on_lost="restart").id
            # A lambda has no import reference: it is pickled and cannot resume.
            ids["lambda"] = sup.agent(lambda: sleep_long()).id  # noqa: PLW0108
            ids["agent"] = sup.agent(sleep_long).id
        print(json.dumps(ids), flush=True)
        if mode == "mixed":
            threading.Event().wait()
        print(json.dumps({"result": sup.result(unit.id, timeout=120)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
