"""``InlineInbox``: a pykka runtime whose messages are handled by the threads that send them.

A unit actor whose handlers never block (a shell's: signal its process, stop;
an agent's: pass frames on) needs no thread of its own. On one, each message
cost a thread's wake and a hand-over of the GIL, and the end a stop message
and a hand-back of the thread, while carrying nothing a thread adds (DESIGN
§8: supervisor CPU and context switches per unit). Here the thread that puts
a message handles it, then any that others put meanwhile; a message put while
another is being handled waits, and the thread already handling takes it
next. So, as on a thread of its own, the actor handles one message at a time,
in the order they came, and its state needs no lock: the inbox's lock orders
each handler after the one before it, whichever thread ran that one.

``on_start`` runs on the starting thread (the supervisor's) when the unit's
launch ran already, else on a thread of the supervisor's ``ActorThreads``: a
launch that waits for a zygote to start must not hold the supervisor. Messages
put meanwhile wait for it.

What a kind must keep to use it: its handlers run on the supervisor's thread
(kill, cancel, stop, replies), the Reaper's (its process's events and frames)
or any sender's, so they never block, never ask anyone, and send only what
cannot block: an agent's frames to its process go out non-blocking, and a
signal the zygote must send is handed to a thread of its own when asked from
the Reaper's thread (``ZygoteClient.signal``), since the zygote may be blocked
sending to it. Shells and agents keep this; pooled agents, whose launch and
kill go through the pool, keep a thread (measured: inline cost them CPU).
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import pykka
from pykka._envelope import Envelope  # the type pykka's actor loop takes from an inbox


class InlineInbox:
    """The inbox of one inline actor: ``put`` from any thread; pykka's teardown reads it."""

    __slots__ = ("_actor", "_busy", "_lock", "_queue")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Guarded by _lock. Invariant: _busy is True while a thread handles this actor's
        # messages (or runs its on_start); only that thread pops from _queue.
        self._queue: deque[Envelope[Any]] = deque()
        self._busy = True  # until the actor has started: puts meanwhile wait
        self._actor: pykka.Actor | None = None

    # -- what pykka calls --------------------------------------------------------------

    def put(self, envelope: Envelope[Any]) -> None:
        with self._lock:
            self._queue.append(envelope)
            if self._busy:
                return  # the thread handling this actor takes it next
            self._busy = True
        self._drain()

    def get(self) -> Envelope[Any]:
        """pykka's teardown only (``empty`` said there is one)."""
        with self._lock:
            return self._queue.popleft()

    def empty(self) -> bool:
        with self._lock:
            return not self._queue

    # -- what the actor calls ------------------------------------------------------------

    def started(self, actor: pykka.Actor) -> None:
        """``actor`` ran its ``on_start`` (this thread): handle what came meanwhile."""
        self._actor = actor
        self._drain()

    def _drain(self) -> None:
        """Handle queued messages until none is left; this thread holds ``_busy``."""
        actor = self._actor
        assert actor is not None
        while True:
            with self._lock:
                if not self._queue:
                    self._busy = False
                    return
                envelope = self._queue.popleft()
            if actor.actor_stopped.is_set():
                _refuse(actor, envelope)
                continue
            try:
                handle_envelope(actor, envelope)  # exceptions are the actor's (on_failure)
            except BaseException:
                self._stop_at(actor)
                raise

    def _stop_at(self, actor: pykka.Actor) -> None:
        """A handler raised what is not an ``Exception``: a KeyboardInterrupt of the main
        thread's (a kind's own BaseException is an error by now, ``kind_code``). The actor
        fails, as after a failed handler (``on_failure``: its unit ends, nothing of it is
        left running), and the sender gets it. What is left is refused, so nothing waits
        on an actor nobody drives."""
        if not actor.actor_stopped.is_set():
            _fail(actor)
        with self._lock:
            left, self._queue = list(self._queue), deque()
            self._busy = False
        for envelope in left:
            _refuse(actor, envelope)


def handle_envelope(actor: pykka.Actor, envelope: Envelope[Any]) -> None:
    """One message, as pykka's actor loop handles it (``Actor._actor_loop_running``)."""
    try:
        response = actor._handle_receive(envelope.message)  # pykka's loop's own step
        if envelope.reply_to is not None:
            envelope.reply_to.set(response)
    except Exception:  # noqa: BLE001 - as pykka's loop: the asker gets it, else the actor fails
        if envelope.reply_to is not None:
            envelope.reply_to.set_exception()
        else:
            _fail(actor)


def _fail(actor: pykka.Actor) -> None:
    """As pykka's loop after a handler raised ``sys.exc_info()``: log, stop, ``on_failure``."""
    actor._handle_failure(*sys.exc_info())
    try:
        actor.on_failure(*sys.exc_info())
    except Exception:  # noqa: BLE001 - pykka logs it the same way
        actor._handle_failure(*sys.exc_info())


def _refuse(actor: pykka.Actor, envelope: Envelope[Any]) -> None:
    """A message for a stopped actor, as pykka's teardown treats it: an ask hears so."""
    if envelope.reply_to is None:
        return  # a tell to a stopped actor is dropped (DESIGN §9)
    if isinstance(envelope.message, pykka.messages._ActorStop):
        envelope.reply_to.set(None)
        return
    error = pykka.ActorDeadError(f"{actor.actor_ref} stopped before handling the message")
    envelope.reply_to.set_exception(exc_info=(pykka.ActorDeadError, error, None))


def start_inline(
    actor: pykka.Actor, inbox: InlineInbox, run: Callable[[Callable[[], None]], None] | None
) -> None:
    """Run ``actor``'s ``on_start`` here, or through ``run`` (a thread), then take messages."""

    def setup() -> None:
        actor._actor_loop_setup()  # pykka's: on_start, with its failure handling
        inbox.started(actor)

    if run is None:
        setup()
    else:
        run(setup)
