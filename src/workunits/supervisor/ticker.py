"""The supervisor actor's inbox, which also keeps its clock: a tick every interval.

Deadlines, output-cap checks, the eviction sweep and the ledger's polls all run
on ticks, so no actor ever sleeps or blocks waiting for time to pass. The tick
used to come from a thread of its own that told the actor "tick" 20 times a
second; each of its wake-ups cost ~0.2 ms of CPU on a small VM, about a third of
an idle supervisor's. Here the actor's own wait for its next message is bounded
by the next tick: when it is due, ``get`` hands the actor a tick instead, whether
messages wait or not (a stream of them cannot starve the deadlines), and a tick
never waits behind them either. Ticks missed while the actor was busy are not
made up in a burst: the next is one interval after the late one, as the thread
that told ticks spaced them too. Ticks end with the actor's loop: once it has
handled its stop, nothing asks for the next.

A ``SimpleQueue`` holds the messages: its put and get are C, where the
``queue.Queue`` pykka gives an actor by default takes a Python lock and a
condition on each.
"""

from __future__ import annotations

import math
import queue
import time
from collections.abc import Callable
from typing import Any

from pykka._envelope import Envelope  # the type pykka's actor loop takes from an inbox


class TickingInbox:
    """pykka's ``ActorInbox``: ``put`` from any thread, ``get`` from the actor's only."""

    def __init__(
        self, make_tick: Callable[[], object], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._messages: queue.SimpleQueue[Envelope[Any]] = queue.SimpleQueue()
        self._make_tick = make_tick
        self._clock = clock
        self._interval: float | None = None  # None: no ticks (tests tick by hand)
        self._due = math.inf  # monotonic time of the next tick; the actor's thread only

    def start_ticking(self, interval: float) -> None:
        """Tick every ``interval`` seconds from now on (before the actor starts)."""
        self._due = self._clock() + interval
        self._interval = interval

    def put(self, envelope: Envelope[Any], /) -> None:
        self._messages.put(envelope)

    def empty(self) -> bool:
        return self._messages.empty()

    def qsize(self) -> int:
        """Messages waiting (ticks are not counted: they are made when due)."""
        return self._messages.qsize()

    def get(self) -> Envelope[Any]:
        while True:
            interval = self._interval
            if interval is None:
                return self._messages.get()
            now = self._clock()
            if now >= self._due:
                self._due = now + interval
                return Envelope(self._make_tick())
            try:
                return self._messages.get(timeout=self._due - now)
            except queue.Empty:
                continue
