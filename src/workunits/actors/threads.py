"""``ActorThreads``: threads that run unit actors' loops, one actor at a time each, reused.

Every unit is a pykka actor with a thread of its own for as long as it lives
(DESIGN §4), but those of ``inline`` kinds, which need none (``actors.inline``).
Starting a thread per unit and letting it exit costs the supervisor process
~0.1 ms of CPU and several context switches per unit, and ``Thread.start``
makes the starting thread (the supervisor's) wait until the new thread runs.
Here a thread whose actor stopped waits a while for the next actor instead of
exiting: handing an actor to it is one queue put, and the starter does not
wait. Nothing changes for the actor: one thread runs its loop, from its
``on_start`` to its ``on_stop``, and no other actor's messages are handled on
that thread meanwhile.

A thread waits at most ``IDLE_FOR`` seconds for its next actor, and at most
``MAX_IDLE`` threads wait at once (a burst of ended units leaves no crowd of
threads behind). ``close`` (the runtime's, last) ends the waiting threads and
joins them; a thread still running an actor exits when that actor stops.
Threads are daemons, as pykka's own are: a safety net only.

Invariant (under ``_lock``): ``_idle`` + the loops queued in ``_handoff`` =
the threads waiting in ``_wait_for_loop``; a loop is queued only for a
thread counted in ``_idle``, so none waits behind a running actor.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

IDLE_FOR = 5.0  # seconds a thread waits for its next actor before it exits
# Threads kept waiting at most; more exit when their actor stops. Each waiting
# thread keeps ~80 KiB resident (its stack's touched pages, its thread state):
# 16 of them made the churn test's RSS grow 1 MiB more. A few cover units that
# start as others end; a burst beyond them pays thread starts, as before.
MAX_IDLE = 4
JOIN_FOR = 5.0  # seconds close() waits for the threads to exit

_Loop = Callable[[], None]
_Job = tuple[_Loop, str]  # an actor's loop and the name its thread takes while it runs
_names = itertools.count()


class ActorThreads:
    """Runs actor loops on reused threads; any thread may call ``run``."""

    def __init__(self, *, idle_for: float = IDLE_FOR, max_idle: int = MAX_IDLE) -> None:
        self._idle_for = idle_for
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._handoff: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = 0  # threads waiting that no queued loop is meant for
        self._closed = False
        self._threads: set[threading.Thread] = set()
        self._busy: set[threading.Thread] = set()  # running an actor's loop now

    def run(self, loop: _Loop, name: str) -> None:
        """Run ``loop`` (an actor's whole life) on a waiting thread, or on a new one."""
        with self._lock:
            if self._idle > 0 and not self._closed:
                self._idle -= 1
                self._handoff.put((loop, name))  # under the lock: see the invariant
                return
        thread = threading.Thread(target=self._serve, args=(loop,), name=name, daemon=True)
        with self._lock:
            self._threads.add(thread)
            self._busy.add(thread)
        thread.start()

    def _serve(self, first: _Loop) -> None:
        """A thread's life: its first actor's loop, then the next ones handed to it."""
        loop = first
        me = threading.current_thread()
        try:
            while True:
                with self._lock:
                    self._busy.add(me)
                try:
                    loop()
                except BaseException:  # pykka's loop handles its own; this is a bug
                    log.exception("an actor's loop raised")
                with self._lock:
                    self._busy.discard(me)
                job = self._wait_for_loop()
                if job is None:
                    return
                loop, threading.current_thread().name = job
        finally:
            with self._lock:
                self._threads.discard(me)
                self._busy.discard(me)

    def _wait_for_loop(self) -> _Job | None:
        """The next actor's loop for this thread, or None: it exits."""
        with self._lock:
            if self._closed or self._idle >= self._max_idle:
                return None
            self._idle += 1
        try:
            return self._handoff.get(timeout=self._idle_for)
        except queue.Empty:
            with self._lock:
                if self._idle > 0:  # withdraw: no loop was queued for this thread
                    self._idle -= 1
                    return None
            # Every waiting thread has a loop queued for it, this one too.
            return self._handoff.get()

    def idle(self) -> int:
        """Threads waiting for an actor now."""
        with self._lock:
            return self._idle

    def count(self) -> int:
        """Threads alive now: running an actor or waiting for one."""
        with self._lock:
            return len(self._threads)

    def close(self) -> None:
        """End the waiting threads and join them.

        A thread still running an actor (one on its way out, or one that
        outlives the supervisor by design) is not waited for: it exits when
        its actor stops.
        """
        with self._lock:
            self._closed = True
            waiting, self._idle = self._idle, 0
            threads = list(self._threads - self._busy)
        for _ in range(waiting):
            self._handoff.put(None)
        current = threading.current_thread()
        deadline = time.monotonic() + JOIN_FOR
        for thread in threads:
            if thread is not current:
                thread.join(max(0.0, deadline - time.monotonic()))

    def thread_name(self, actor_class: type) -> str:
        """A name like pykka's (``ShellActor-3``), for the first actor a thread runs."""
        return f"{actor_class.__name__}-{next(_names)}"
