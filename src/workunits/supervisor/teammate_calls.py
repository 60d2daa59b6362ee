"""``TeammateCalls``: the facade's tells and asks to teammates (DESIGN §3), in the caller's thread.

How an ask avoids blocking any actor: the caller pickles the message, then one
request (``Send``) checks the teammate can take it and routes it with a
*route*, a small non-blocking callable that the supervisor calls exactly once,
when the teammate answers or ends (``supervisor.actor.asks``). The caller then waits
on its own primitive -- a ``threading.Event`` for ``ask``, an asyncio future
for ``ask_async``, a ``concurrent.futures.Future`` for ``ask_future`` and
proxies -- never on an actor. Answers are unpickled in the caller's thread
(or, for futures, in one answer thread), never in the supervisor's.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future
from typing import Any

from workunits._core import ids
from workunits._core.errors import AskTimeout
from workunits._core.seconds import ask_timeout
from workunits._wire.frames import encode_message
from workunits._wire.results import reply_of
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.asks import Route
from workunits.supervisor.channel import ActorChannel


class TeammateCalls:
    def __init__(self, channel: ActorChannel) -> None:
        self._channel = channel
        self._answers: _AnswerThread | None = None
        # Guards _answers: made at the first ask_future, dropped at close; O(1) work.
        self._answers_lock = threading.Lock()

    def tell(self, work_id: str, message: Any) -> None:
        ids.validate(work_id)
        self._channel.ask(rq.SendToTeammate(work_id, encode_message(message), ask=False))

    def ask(self, work_id: str, message: Any, timeout: float | None) -> Any:
        timeout = ask_timeout(timeout)
        box = _Box()
        token = self._route(work_id, message, box.put)
        if not box.event.wait(timeout):
            self._forget(work_id, token)
            if not box.event.is_set():  # the answer may have come just as we gave up
                raise AskTimeout(f"{work_id} did not answer within {timeout} s")
        return reply_of(*box.value)

    def ask_future(self, work_id: str, message: Any) -> Future[Any]:
        future: Future[Any] = Future()
        answers = self._answer_thread()

        def route(ok: bool, value: Any) -> None:
            answers.put(future, ok, value)

        self._route(work_id, message, route)
        return future

    async def ask_async(self, work_id: str, message: Any, timeout: float | None) -> Any:
        timeout = ask_timeout(timeout)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[bool, Any]] = loop.create_future()

        def route(ok: bool, value: Any) -> None:
            loop.call_soon_threadsafe(_set_once, answer, (ok, value))

        token = await asyncio.to_thread(self._route, work_id, message, route)
        try:
            async with asyncio.timeout(timeout):
                ok, value = await answer
        except TimeoutError:
            self._forget(work_id, token)
            raise AskTimeout(f"{work_id} did not answer within {timeout} s") from None
        except asyncio.CancelledError:
            self._forget(work_id, token)
            raise
        return reply_of(ok, value)

    def _route(self, work_id: str, message: Any, route: Route) -> int:
        ids.validate(work_id)
        return self._channel.ask(
            rq.SendToTeammate(work_id, encode_message(message), ask=True, reply=route)
        )

    def _forget(self, work_id: str, token: int) -> None:
        # Best effort and non-blocking (the async twin calls it on the loop): the
        # answer is not waited for; a closed supervisor has forgotten it anyway.
        self._channel.post(rq.ForgetAsk(work_id, token))

    def _answer_thread(self) -> _AnswerThread:
        with self._answers_lock:
            if self._answers is None:
                self._answers = _AnswerThread()
            return self._answers

    def close(self) -> None:
        """Called by ``Supervisor.close`` once the supervisor actor has stopped (routes called)."""
        with self._answers_lock:
            answers, self._answers = self._answers, None
        if answers is not None:
            answers.close()


class _Box:
    """One answer and the event that says it is there."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.value: tuple[bool, Any] = (False, None)

    def put(self, ok: bool, value: Any) -> None:  # a route: the supervisor's thread
        self.value = (ok, value)
        self.event.set()


def _set_once(future: asyncio.Future[tuple[bool, Any]], value: tuple[bool, Any]) -> None:
    if not future.done():
        future.set_result(value)


class _AnswerThread:
    """Resolves ``ask_future`` futures off the supervisor's thread.

    Unpickling an answer runs the teammate's code, and a Future's done-callbacks
    run in the thread that resolves it: neither may run in the supervisor actor.
    A daemon thread, so a callback that hangs cannot hang interpreter exit.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], bool, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="workunits-answers", daemon=True)
        self._thread.start()

    def put(self, future: Future[Any], ok: bool, value: Any) -> None:
        self._queue.put((future, ok, value))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            future, ok, value = item
            if not future.set_running_or_notify_cancel():
                continue  # the caller cancelled it
            try:
                future.set_result(reply_of(ok, value))
            except BaseException as exc:  # noqa: BLE001 - it belongs to whoever holds the future
                future.set_exception(exc)

    def close(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:  # close() from a done-callback
            self._thread.join(timeout=5)
