"""Two consumers in two processes over one mailbox, with SIGKILLs at random points.

Each notice goes to one consumer at a time; one that was acted on and then
acknowledged never comes again; one whose consumer died before acknowledging
comes again, marked ``redelivered``; nothing is lost when a consumer or the
supervisor is SIGKILLed (DESIGN invariant 11). Hypothesis draws where the
kills fall.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workunits as wu
from tests.cli.live import REPO, Serve, cli_env
from tests.conftest import eventually

UNITS = 24
WAIT = 60.0

# A kill: who, and after how many units were submitted.
Kill = tuple[str, int]
kills = st.lists(
    st.tuples(st.sampled_from(["consumer-a", "consumer-b", "supervisor"]), st.integers(0, UNITS)),
    max_size=3,
)


class Consumer:
    def __init__(self, state: Path, log: Path) -> None:
        self.state, self.log = state, log
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.notices.consumer", str(self.state), str(self.log)],
            stdout=subprocess.PIPE,
            text=True,
            env=cli_env(),
            cwd=REPO,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    def kill_and_restart(self) -> None:
        self.stop()
        self.proc = self._start()

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(WAIT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _logged(*logs: Path) -> list[tuple[str, bool]]:
    seen = []
    for log in logs:
        if log.exists():
            for line in log.read_text().splitlines():
                work_id, redelivered = line.split()
                seen.append((work_id, redelivered == "1"))
    return seen


@pytest.mark.slow
@pytest.mark.timeout(600)
@settings(
    max_examples=int(os.environ.get("WORKUNITS_CONSUMER_EXAMPLES", "4")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(schedule=kills)
def test_competing_consumers_lose_nothing_and_repeat_only_what_was_not_acknowledged(
    tmp_path_factory: pytest.TempPathFactory, schedule: list[Kill]
) -> None:
    root = tmp_path_factory.mktemp("consumers")
    state = root / "state"
    serve = Serve(state)
    a = Consumer(state, root / "a.log")
    b = Consumer(state, root / "b.log")
    consumers = {"consumer-a": a, "consumer-b": b}
    ids: list[str] = []
    try:
        with wu.connect(state) as client:
            for n in range(UNITS + 1):
                for who, at in schedule:
                    if at != n:
                        continue
                    if who == "supervisor":
                        serve.stop(signal.SIGKILL)
                        serve = Serve(state)
                    else:
                        consumers[who].kill_and_restart()
                if n < UNITS:
                    ids.append(client.shell("true").id)
            for work_id in ids:
                client.wait(work_id, WAIT)
            # Every notice ends up acknowledged, by one of them.
            eventually(lambda: client.ledger.outbox.size() == 0, timeout=WAIT, what="all acked")
    finally:
        for consumer in consumers.values():
            consumer.stop()
        serve.stop()
    seen = _logged(root / "a.log", root / "b.log")
    counts = Counter(work_id for work_id, _ in seen)
    assert set(counts) == set(ids), "a notice was lost (or one came for a unit not ours)"
    for work_id, times in counts.items():
        if times > 1:
            # Only a consumer's death between acting and acknowledging repeats a
            # notice, and the repeat says so.
            assert any(who.startswith("consumer") for who, _ in schedule), work_id
            repeats = [r for w, r in seen if w == work_id]
            assert repeats.count(False) == 1, f"{work_id} was first-delivered twice"
