"""A supervisor process for the retry tests: submit a flaky agent, report its ID, wait.

Usage: python -m tests.retry_host STATE. The agent fails its first attempt
and waits 600 s for its second: the test SIGKILLs this process meanwhile.
"""

from __future__ import annotations

import json
import sys
import threading

import workunits as wu
from tests.retry_jobs import fail_until


def main(state: str) -> None:
    with wu.Supervisor(state) as sup:
        policy = wu.Retry(max_attempts=3, initial=600.0, jitter=False)
        unit = sup.agent(fail_until, 2, retry=policy, key="flaky")
        print(json.dumps({"id": unit.id}), flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
