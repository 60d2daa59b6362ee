"""The facade's calls for teammates, monitors and dreams (DESIGN §3), mixed into Supervisor.

Runs in the caller's thread, like the rest of the facade. How an ask avoids
blocking any actor: the caller pickles the message, then one facade call
(``SupervisorActor.send``) checks the teammate can take it and routes it with a
*route*, a small non-blocking callable that the supervisor calls exactly once,
when the teammate answers or ends (``supervisor.asks``). The caller then waits
on its own primitive — a ``threading.Event`` for ``ask``, an asyncio future for
``ask_async``, a ``concurrent.futures.Future`` for ``ask_future`` and proxies —
never on an actor. Answers are unpickled in the caller's thread (or, for
futures, in one answer thread), never in the supervisor's.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

import pykka

from workunits import _ids
from workunits._errors import AskTimeout, SpecError
from workunits._remote.runtime import check_available
from workunits._wire.frames import encode_message
from workunits._wire.results import reply_of
from workunits._wire.specs import DEFAULT_RATE_LIMIT, AgentSpec, MonitorSpec, TeammateSpec
from workunits.actors.remote_teammate import RemoteTeammateSpec
from workunits.supervisor.asks import Route
from workunits.supervisor.handle import WorkHandle
from workunits.supervisor.teammate import TeammateHandle

if TYPE_CHECKING:
    from workunits.supervisor.actor import SupervisorActor


class KindsFacade:
    """Teammates (``t``), monitors (``m``) and dreams (``d``); a base of ``Supervisor``."""

    if TYPE_CHECKING:
        _actor: pykka.ActorProxy[SupervisorActor]

        def _call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...
        def submit(
            self,
            kind: str,
            spec: Any,
            *,
            description: str = "",
            parent: str | None = None,
            timeout: float | None = None,
            key: str | None = None,
            max_attempts: int | None = None,
        ) -> WorkHandle: ...

    # Made by the facade's constructor (_init_kinds): per supervisor, never shared.
    _answers: _AnswerThread | None
    _answers_lock: threading.Lock

    def _init_kinds(self) -> None:
        self._answers = None
        # Guards _answers: made at the first ask_future, dropped at close; O(1) work.
        self._answers_lock = threading.Lock()

    # -- starting units ----------------------------------------------------------

    def teammate(
        self,
        cls: type[Any],
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        memory_limit: int | None = None,
        remote: bool = False,
        resources: Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> TeammateHandle:
        """Create ``cls(*args, **kwargs)`` in its own process as a ``t`` unit.

        It takes messages in ``on_receive(message)`` (and method calls through
        ``proxy()``) one at a time, until ``stop()``, a cancel or a kill.
        ``remote=True`` puts the instance in a Ray actor (``workunits[ray]``), with
        Ray ``resources`` as for ``remote()``; the handle and its semantics are the same.
        """
        spec: TeammateSpec | RemoteTeammateSpec
        if remote:
            if memory_limit is not None:
                raise SpecError(
                    'memory_limit is for local teammates; on Ray ask for resources={"memory": n}'
                )
            check_available()
            spec = RemoteTeammateSpec.for_class(cls, args, kwargs, resources=resources)
        elif resources is not None:
            raise SpecError("resources are for remote teammates (remote=True)")
        else:
            spec = TeammateSpec.for_class(cls, args, kwargs, memory_limit=memory_limit)
        name = spec.name if description is None else description
        handle = self.submit("t", spec, description=name, timeout=timeout)
        return TeammateHandle(cast(Any, self), handle.id, cls)

    def monitor(
        self,
        source: str | Sequence[str] | Callable[[], Iterable[str | bytes]],
        pattern: str | re.Pattern[str],
        *,
        description: str | None = None,
        rate_limit: float | None = DEFAULT_RATE_LIMIT,
        timeout: float | None = None,
    ) -> WorkHandle:
        """Watch a command's output (str for ``/bin/sh -c``, or argv) or a callable's lines.

        Each line matching ``pattern`` (``re.search``) becomes a ``MonitorEvent`` in
        the application's mailbox, at most ``rate_limit`` per second (None: no
        limit); ``suppressed`` counts the matches dropped before it. The monitor
        ends ``completed`` when its source ends; its result counts lines, matches
        and events, with the command's exit code.
        """
        spec = MonitorSpec.for_source(source, pattern, rate_limit=rate_limit)
        name = spec.name if description is None else description
        return self.submit("m", spec, description=name, timeout=timeout)

    def dream(
        self,
        fn: Callable[..., Any],
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        memory_limit: int | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Run ``fn(*args, **kwargs)`` as an agent at idle CPU priority (a ``d`` unit)."""
        spec = AgentSpec.build(fn, args, kwargs, memory_limit=memory_limit, idle_priority=True)
        name = spec.name if description is None else description
        return self.submit("d", spec, description=name, timeout=timeout)

    def workflow(
        self,
        fn: Callable[..., Any],
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        memory_limit: int | None = None,
        key: str | None = None,
        max_attempts: int | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Run ``fn(*args, **kwargs)`` as a workflow (``w``): its ``ctx.step()``s run once.

        Resumable when ``fn`` is importable: after a crash the next supervisor
        runs it again and finished steps return their stored results.
        """
        spec = AgentSpec.build(fn, args, kwargs, memory_limit=memory_limit)
        name = spec.name if description is None else description
        return self.submit(
            "w", spec, description=name, timeout=timeout, key=key, max_attempts=max_attempts
        )

    def shed(self, n: int | None = None) -> list[str]:
        """Kill up to ``n`` running dreams (all with None), newest first; their IDs.

        They end ``killed`` with reason ``shed``, which tells them apart from an
        explicit kill: shed work is worth resubmitting when the load falls.
        """
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise SpecError(f"n must be an int >= 0 or None, got {n!r}")
        return cast("list[str]", self._call("shed", n))

    # -- messages to teammates ------------------------------------------------------

    def tell(self, work_id: str, message: Any) -> None:
        """Queue ``message`` for a running teammate; TeammateEnded if it ended or is ending."""
        _ids.validate(work_id)
        self._call("send", work_id, encode_message(message), ask=False)

    def ask(self, work_id: str, message: Any, timeout: float | None = None) -> Any:
        """The teammate's answer to ``message``, or the exception its handler raised.

        TeammateEnded if it ends before answering (a kill mid-ask), AskTimeout
        after ``timeout`` seconds (None: until it answers or ends).
        """
        box = _Box()
        token = self._route(work_id, message, box.put)
        if not box.event.wait(timeout):
            self._forget(work_id, token)
            if not box.event.is_set():  # the answer may have come just as we gave up
                raise AskTimeout(f"{work_id} did not answer within {timeout} s")
        return reply_of(*box.value)

    def ask_future(self, work_id: str, message: Any) -> Future[Any]:
        """Like ``ask``, returning at once; the future is resolved in the answer thread."""
        future: Future[Any] = Future()
        answers = self._answer_thread()

        def route(ok: bool, value: Any) -> None:
            answers.put(future, ok, value)

        self._route(work_id, message, route)
        return future

    async def ask_async(self, work_id: str, message: Any, timeout: float | None = None) -> Any:
        """Like ``ask`` without blocking the event loop."""
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

    def stop(self, work_id: str) -> bool:
        """Ask a teammate to stop after the messages already sent; False if not running."""
        return cast(bool, self._call("stop_teammate", work_id))

    # -- plumbing ---------------------------------------------------------------------

    def _route(self, work_id: str, message: Any, route: Route) -> int:
        _ids.validate(work_id)
        return cast(
            int, self._call("send", work_id, encode_message(message), ask=True, reply=route)
        )

    def _forget(self, work_id: str, token: int) -> None:
        # Best effort and non-blocking (the async twin calls it on the loop): the
        # future is not waited for; a closed supervisor has forgotten it anyway.
        with contextlib.suppress(pykka.ActorDeadError):
            self._actor.forget_ask(work_id, token)

    def _answer_thread(self) -> _AnswerThread:
        with self._answers_lock:
            if self._answers is None:
                self._answers = _AnswerThread()
            return self._answers

    def _close_kinds(self) -> None:
        """Called by ``close`` once the supervisor actor has stopped (all routes called)."""
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
