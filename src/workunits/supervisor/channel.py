"""``ActorChannel``: the facade's one way to the supervisor actor -- typed asks with a timeout.

``ask(request: Request[R]) -> R``: the request goes through the actor's
``on_receive`` (``ActorRef.ask``, a documented pykka call), and its answer
comes back typed by the request (``supervisor.actor.requests``). Every ask has a
timeout: a pykka future of a stopping actor can stay unresolved, and no call
may hang because of that.

``ask_async`` is the twin for an event loop. Awaiting a pykka future would
block the loop (DESIGN §9) and pykka futures take no done-callbacks, so the
ask is sent without blocking and its pykka future handed to one relay thread
per channel, which waits on the futures in the order they were asked and
resolves each caller's asyncio future with ``call_soon_threadsafe``. The
actor answers asks in the order they arrive, so waiting in that order never
holds a ready answer back behind a slow one; and however many callers wait,
one thread does, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from typing import Any, TypeVar

import pykka

from workunits._core.errors import SupervisorClosed
from workunits.supervisor.actor.requests import Request

R = TypeVar("R")


def no_answer(timeout: float) -> SupervisorClosed:
    """An ask the supervisor did not answer in time: it is busy, not closed.

    A ``SupervisorClosed`` still, as documented (``except SupervisorClosed``
    is how callers learn a call did not go through), but the message says
    what happened: the request stays in the actor's inbox and may yet take
    effect, so the caller looks before doing it again.
    """
    return SupervisorClosed(
        f"the supervisor did not answer within {timeout} s (ask_timeout): it is not "
        f"closed but busy (a kind's slow validate_spec, a slow ledger write), and the "
        f"call may still take effect; check its effect (get, list) before trying again, "
        f"or give Supervisor(ask_timeout=) more time"
    )


class ActorChannel:
    def __init__(self, ref: pykka.ActorRef[Any], timeout: float) -> None:
        self._ref = ref
        self._timeout = timeout
        self.closed = False  # set by Supervisor.close(): only close() itself asks after it
        self._relay: _Relay | None = None
        # Guards _relay: made at the first ask_async, dropped at close_relay; O(1) work.
        self._relay_lock = threading.Lock()

    def ask(self, request: Request[R]) -> R:
        """The actor's answer to ``request``, in the caller's thread; SupervisorClosed if none."""
        if self.closed:
            raise SupervisorClosed("the supervisor is closed")
        return self.ask_while_closing(request)

    def ask_while_closing(self, request: Request[R]) -> R:
        """``ask`` for ``Supervisor.close()``, which marks the channel closed first."""
        deadline = time.monotonic() + self._timeout
        try:
            self._ref.ask(request, timeout=self._timeout)
        except pykka.ActorDeadError:
            raise SupervisorClosed("the supervisor is closed") from None
        except pykka.Timeout:
            raise no_answer(self._timeout) from None
        # A deferred request (a submit in a group commit) is answered after that.
        if not request.wait_settled(max(0.0, deadline - time.monotonic())):
            raise no_answer(self._timeout)
        return request.answered()

    async def ask_async(self, request: Request[R]) -> R:
        """``ask`` without blocking the event loop: the caller awaits, no thread waits for it.

        A cancelled caller does not withdraw the request: the actor still
        carries it out (as a thread running ``ask`` would).
        """
        if self.closed:
            raise SupervisorClosed("the supervisor is closed")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[R] = loop.create_future()
        try:
            # Non-blocking: puts the message in the actor's inbox.
            future = self._ref.ask(request, block=False)
        except pykka.ActorDeadError:
            raise SupervisorClosed("the supervisor is closed") from None
        self._relay_for_asks().put(
            _Pending(future, request, loop, answer, time.monotonic() + self._timeout)
        )
        return await answer

    def _relay_for_asks(self) -> _Relay:
        with self._relay_lock:
            if self._relay is None:
                self._relay = _Relay(self._timeout)
            return self._relay

    def close_relay(self) -> None:
        """Once the actor has stopped (every future resolved): end the relay thread."""
        with self._relay_lock:
            relay, self._relay = self._relay, None
        if relay is not None:
            relay.close()

    def post(self, request: Request[Any]) -> None:
        """Ask without waiting for the answer (from a finalizer, or an event loop's thread)."""
        if not self.closed:
            with contextlib.suppress(pykka.ActorDeadError):
                self._ref.ask(request, block=False)

    def tell(self, message: object) -> None:
        """A tell that is not a request (the listener's wake-up); dropped once the actor stopped."""
        with contextlib.suppress(pykka.ActorDeadError):
            self._ref.tell(message)


class _Pending:
    __slots__ = ("answer", "deadline", "future", "loop", "request")

    def __init__(
        self,
        future: pykka.Future[Any],
        request: Request[Any],
        loop: asyncio.AbstractEventLoop,
        answer: asyncio.Future[Any],
        deadline: float,
    ) -> None:
        self.future = future
        self.request = request
        self.loop = loop
        self.answer = answer
        self.deadline = deadline


class _Relay:
    """One daemon thread: waits on asked futures in order, resolves the callers' asyncio futures.

    A daemon, so a caller's loop that never closes cannot hold the process;
    every wait has the channel's timeout, so it cannot hang either.
    """

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="workunits-async-asks", daemon=True)
        self._thread.start()

    def put(self, pending: _Pending) -> None:
        self._queue.put(pending)

    def _run(self) -> None:
        while (pending := self._queue.get()) is not None:
            outcome: tuple[bool, Any]
            try:
                pending.future.get(timeout=max(0.0, pending.deadline - time.monotonic()))
                # A deferred request is answered later; asks are answered in order
                # all the same (any other message commits the group first).
                left = max(0.0, pending.deadline - time.monotonic())
                if pending.request.wait_settled(left):
                    outcome = (True, pending.request.answered())
                else:
                    outcome = (False, no_answer(self._timeout))
            except pykka.ActorDeadError:
                outcome = (False, SupervisorClosed("the supervisor is closed"))
            except pykka.Timeout:
                outcome = (False, no_answer(self._timeout))
            except BaseException as exc:  # noqa: BLE001 - the asker's, as with a blocking ask
                outcome = (False, exc)
            # The loop may have closed meanwhile: then nobody is waiting.
            with contextlib.suppress(RuntimeError):
                pending.loop.call_soon_threadsafe(_settle, pending.answer, outcome)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=self._timeout)


def _settle(answer: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    """On the caller's loop: the answer, unless the caller gave up (cancelled) meanwhile."""
    if answer.done():
        return
    ok, value = outcome
    if ok:
        answer.set_result(value)
    else:
        answer.set_exception(value)
