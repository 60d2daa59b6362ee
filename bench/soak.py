"""Soak: mixed load on one supervisor for a while, with its RSS and descriptors over time.

    python bench/soak.py [--seconds 600] [--every 30] [--inflight 32]

Keeps ``--inflight`` units going at once: ``true`` shells, short ``sleep``
shells, ``operator:add`` agents, shells that write 1 MiB, and a cancel of
every tenth sleep. Every ``--every`` seconds it prints a row: units ended so
far, units/s over the interval, the supervisor's RSS and open descriptors,
units resident in memory, and the outbox's rows (all, and unacknowledged).
At the end it checks that nothing was lost: every unit submitted reached a
terminal status, and none is still running.
It takes the notices as they come, as a parent would.
Not part of CI (``make soak``).
"""

from __future__ import annotations

import argparse
import operator
import os
import random
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

import workunits as wu
from workunits import Status, is_terminal


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def submit(sup: wu.Supervisor, rng: random.Random) -> tuple[str, bool]:
    """One unit of the mix; True when the caller should cancel it."""
    pick = rng.random()
    if pick < 0.4:
        return sup.shell(["true"]).id, False
    if pick < 0.6:
        return sup.shell(["sleep", "0.2"]).id, rng.random() < 0.1
    if pick < 0.9:
        return sup.agent(operator.add, 1, 2).id, False
    return sup.shell(["head", "-c", "1M", "/dev/zero"]).id, False


ROW = "| {:5.0f} | {:5d} | {:7.1f} | {:9.1f} | {:3d} | {:8d} | {:6d} | {:7d} |"


def soak(sup: wu.Supervisor, seconds: float, every: float, inflight_max: int) -> int:
    rng = random.Random(7)  # noqa: S311 - a reproducible load, not a secret
    pause = threading.Event()
    # A count, not a list of IDs: the soak runs in the supervisor's process, and
    # 60,000 IDs kept here were most of the RSS "creep" an earlier run reported.
    submitted = 0
    inflight: deque[str] = deque()
    ended = last_ended = 0
    start = last = time.monotonic()
    # The outbox read through a client of its own, as another process would.
    ledger = wu.connect(sup.state_dir).ledger
    print("| t (s) | ended | units/s | RSS (MiB) | fds | resident | outbox | unacked |")
    print("|------:|------:|--------:|----------:|----:|---------:|-------:|--------:|")
    print(ROW.format(0, 0, 0.0, rss_mib(), fds(), 0, 0, 0), flush=True)
    mailbox = sup.notifications()
    noticed = 0
    while time.monotonic() - start < seconds:
        # Take the notices as a parent would: an unread mailbox grows by one notice
        # (with up to 64 KiB of output tail) per unit, by design.
        while mailbox.get_nowait() is not None:
            noticed += 1
        while len(inflight) < inflight_max:
            work_id, cancel = submit(sup, rng)
            submitted += 1
            inflight.append(work_id)
            if cancel:
                sup.cancel(work_id, grace=0.5)
        work_id = inflight.popleft()
        if is_terminal(sup.get(work_id).status):
            ended += 1
        else:
            inflight.append(work_id)
            pause.wait(0.001)
        now = time.monotonic()
        if now - last >= every:
            rate = (ended - last_ended) / (now - last)
            resident = len(sup.resident_ids())
            outbox = (ledger.outbox.row_count(), ledger.outbox.size())
            print(
                ROW.format(now - start, ended, rate, rss_mib(), fds(), resident, *outbox),
                flush=True,
            )
            last, last_ended = now, ended
    for work_id in inflight:
        sup.wait(work_id, timeout=60)
        ended += 1
    while noticed < submitted:  # one notice per unit: a missing one times out here
        mailbox.get(timeout=10)
        noticed += 1
    # Every unit the ledger holds is terminal: none pending, none running.
    lost = sup.list(status=Status.PENDING) + sup.list(status=Status.RUNNING)
    total = time.monotonic() - start
    print(
        f"\n{submitted} units in {total:.0f} s ({ended / total:.1f}/s); "
        f"not terminal: {len(lost)}; notices: {noticed}; "
        f"RSS {rss_mib():.1f} MiB, {fds()} fds; "
        f"outbox rows {ledger.outbox.row_count()} ({ledger.outbox.size()} unacknowledged)"
    )
    whole = not lost and ended == noticed == submitted
    return 0 if whole else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--inflight", type=int, default=32)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="workunits-soak-") as tmp,
        wu.Supervisor(Path(tmp) / "state", eviction_grace=1.0) as sup,
    ):
        return soak(sup, args.seconds, args.every, args.inflight)


if __name__ == "__main__":
    sys.exit(main())
