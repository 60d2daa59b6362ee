"""Ending the work at close (invariant 10): kill everything, wait a grace, record the stuck.

Runs in the thread that calls ``Supervisor.close()`` (or the cleanup thread
after a signal), never in an actor and never in a signal handler.
"""

from __future__ import annotations

import time

from workunits._core.errors import UnknownWork
from workunits._core.status import is_terminal
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.channel import ActorChannel
from workunits.supervisor.waiters import TerminalWaiters

STUCK = "did not exit within the shutdown grace"


def end_all_work(
    channel: ActorChannel, waiters: TerminalWaiters, *, deploy: bool, grace: float
) -> None:
    """Kill running work (reason ``shutdown``) and wait up to ``grace`` for each end.

    A unit that has not reported its end by then is recorded killed anyway.
    With ``deploy`` resumable and pending units are stopped without a terminal
    write, for the next session to resume or start: this returns as soon as
    each has stopped (an agent at its next checkpoint), ``grace`` at most.
    """
    ending = channel.ask_while_closing(rq.BeginShutdown(deploy, grace))
    deadline = time.monotonic() + grace
    stuck: list[str] = []
    for work_id in ending:
        # Register, then read: no lost wake-up. A unit handed over stops without an end.
        waiter = waiters.add(work_id, stops_too=deploy)
        try:
            try:
                record = channel.ask_while_closing(rq.Get(work_id))
            except UnknownWork:
                continue  # it ended and was evicted already (a short eviction grace)
            remaining = max(0.0, deadline - time.monotonic())
            # A unit handed over is terminal in memory only (its record is never
            # written): it has stopped, and its waiter was woken or is about to be.
            if not is_terminal(record.status) and not waiter.event.wait(remaining):
                stuck.append(work_id)
        finally:
            waiters.discard(work_id, waiter)
    if stuck:
        channel.ask_while_closing(rq.ForceEnd(tuple(stuck), STUCK))
