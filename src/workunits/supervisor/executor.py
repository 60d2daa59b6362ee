"""``concurrent.futures.Executor`` over units: ``sup.executor()`` (isolated agents), ``sup.pool()``.

Code written for ``ProcessPoolExecutor`` drops these in: ``submit`` returns a
real ``concurrent.futures.Future`` (``as_completed``, ``wait``,
``asyncio.wrap_future`` and ``loop.run_in_executor`` take it) whose ``id`` is
its unit's; ``map`` and ``shutdown`` keep the stdlib's semantics. Each task is
still a full unit: an ID, a ledger row, an actor, one notice, its own kill.

What differs from a process pool, and why:

- ``max_workers`` caps how many of this executor's units run at once (a
  batch limit kept by the supervisor, ``supervisor.actor.batches``): every
  task is written to the ledger at ``submit`` as a ``pending`` unit with its
  ID, and starts when the executor has room. ``cancel()`` of a future whose
  unit has not started ends the unit ``killed`` (reason ``cancelled``)
  without running it; of a started one it is refused (False), as the stdlib's.
- A future stays *pending* until its unit ends (``running()`` is False
  meanwhile): the supervisor tells ends, not starts, to its waiters.
- A unit that failed sets the exception its function raised (rebuilt from
  the unit's record, with a note naming the unit), or ``WorkFailed`` when it
  cannot be rebuilt (the process crashed, the exception does not unpickle);
  a unit killed by someone else sets ``WorkKilled``.
- ``map`` submits every item as one batch (one request to the supervisor, one
  ledger transaction); ``chunksize`` is accepted and each item stays its own
  unit. Leaving its iterator early (``break``, an exception, the timeout)
  kills the units whose results were not read, started or not: abandoned work
  does not hold the machine (a thread pool cannot do that; units can).
- ``shutdown`` shuts this executor, not the supervisor: its units' processes
  are the supervisor's, and ``sup.executor()`` gives a new executor.

Futures are resolved on one thread per executor (``_Resolver``), never on the
supervisor actor's: decoding a result may run user code, and so may a future's
done-callbacks.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import CancelledError, Executor, Future
from concurrent.futures import wait as wait_futures
from concurrent.futures._base import CANCELLED
from typing import TYPE_CHECKING, Any

from workunits._core.errors import SpecError, SupervisorClosed, WorkFailed
from workunits._core.record import WorkRecord
from workunits._core.sandbox import Sandbox, check_sandbox
from workunits._core.seconds import wait_timeout
from workunits._core.status import Status
from workunits._surface import batch
from workunits._wire.results import result_of
from workunits.supervisor import batch_requests
from workunits.supervisor.actor.batches import BatchLimit
from workunits.supervisor.handle import WorkHandle

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


class UnitFuture(Future[Any]):
    """A ``concurrent.futures.Future`` for one unit; ``id`` is the unit's ID.

    Made by an executor's ``submit``; the executor's thread resolves it.
    """

    def __init__(self, supervisor: Supervisor, work_id: str) -> None:
        super().__init__()
        self.id = work_id
        self._supervisor = supervisor
        self._withdrawing = False  # a cancel() is withdrawing the unit: its kill is ours

    @property
    def handle(self) -> WorkHandle:
        """The unit's handle: ``get``, ``read_output``, ``stream``, ``kill``..."""
        return WorkHandle(self._supervisor, self.id)

    def __repr__(self) -> str:
        return f"<UnitFuture {self.id} {self._state.lower()}>"

    def cancel(self) -> bool:
        """Cancel the task if its unit has not started: the unit ends ``killed`` (reason
        ``cancelled``) and never runs. False once it runs or has ended, as the stdlib says.

        Runs in the caller's thread (one ask of the supervisor actor).
        """
        if self.done():
            return self.cancelled()
        self._withdrawing = True
        try:
            (withdrawn,) = batch_requests.withdraw_pending(self._supervisor, (self.id,))
        except SupervisorClosed:
            withdrawn = False
        if not withdrawn:
            self._withdrawing = False
            return self.cancelled()
        return self._cancelled_here()

    def _cancelled_here(self) -> bool:
        """The unit was withdrawn: the future is cancelled, and ``wait``/``as_completed``
        hear so (the stdlib's executors call ``set_running_or_notify_cancel`` for that)."""
        if Future.cancel(self):
            with self._condition:  # the caller's cancel and the resolver may both get here
                if self._state == CANCELLED:
                    self.set_running_or_notify_cancel()
        return self.cancelled()

    def _resolve(self, record: WorkRecord | None) -> None:
        """On the executor's thread: the unit ended (``record``), or its supervisor closed
        (None). A second resolution of an ended future is ignored."""
        if record is not None and record.status == Status.KILLED and self._withdrawing:
            self._cancelled_here()
            return
        with self._condition:  # a cancel may be under way in another thread
            if self.done() or not self.set_running_or_notify_cancel():
                return  # resolved already, or cancelled meanwhile
        if record is None:
            self.set_exception(SupervisorClosed(f"the supervisor closed before {self.id} ended"))
            return
        try:
            value = result_of(record)
        except WorkFailed as failure:
            cause = failure.__cause__
            if cause is not None and isinstance(cause, Exception):
                cause.add_note(f"raised in unit {self.id} ({failure})")
                self.set_exception(cause)
            else:
                self.set_exception(failure)
            return
        except BaseException as exc:  # noqa: BLE001 - WorkKilled, an undecodable value: its own
            self.set_exception(exc)
            return
        self.set_result(value)
        del value  # a result the caller dropped must not live on in this frame


_STOP = object()


class _Resolver:
    """The executor's thread: resolves its futures as their units end.

    Fed by the supervisor's terminal waiters (a callback on the actor's thread
    that only queues), started at the first submit, gone once the executor is
    shut down and has nothing outstanding.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards _thread: started once

    def put(self, future: UnitFuture, record: WorkRecord | None) -> None:
        """Any thread: resolve ``future`` with ``record`` on the executor's thread."""
        self._queue.put((future, record))

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._queue.put(_STOP)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            future, record = item
            future._resolve(record)
            del item, future, record  # hold no result past its future's resolution


def _next_result(futures: list[UnitFuture], end: float | None) -> Any:
    """The result of the last future of ``futures``, popped; put back if it timed out."""
    future = futures.pop()
    try:
        return future.result(None if end is None else max(0.0, end - time.monotonic()))
    finally:
        if not future.done():
            futures.append(future)  # timed out: its unit is killed with the rest
        del future


class UnitExecutor(Executor):
    """An executor whose tasks are units of one supervisor; see the module docstring.

    ``submit``, ``map`` and ``shutdown`` may be called from any thread.
    """

    _reuse = False  # pooled units (``sup.pool()``) or isolated agents

    def __init__(
        self, sup: Supervisor, max_workers: int, *, sandbox: Sandbox | None = None
    ) -> None:
        batch.check_max_workers(max_workers)
        check_sandbox(sandbox)
        self._sup = sup
        self.max_workers = max_workers
        self.sandbox = sandbox  # every unit's policy (None: the default protection)
        self._batch = BatchLimit(secrets.token_hex(8), max_workers)
        self._resolver = _Resolver(f"workunits-executor-{self._batch.token}")
        # Guards _shutdown and _outstanding; O(1) work under it.
        self._lock = threading.Lock()
        self._shutdown = False
        self._outstanding: set[UnitFuture] = set()  # submitted, not yet resolved

    def __repr__(self) -> str:
        return f"<{type(self).__name__} max_workers={self.max_workers}>"

    # -- submitting ----------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> UnitFuture:
        """``fn(*args, **kwargs)`` as one unit; its future. RuntimeError after ``shutdown``."""
        (future,) = self._submit_calls([(fn, args, kwargs)])
        return future

    def _submit_calls(
        self, calls: list[tuple[Callable[..., Any] | str, tuple[Any, ...], dict[str, Any]]]
    ) -> list[UnitFuture]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
        records = batch_requests.submit_calls(
            self._sup, calls, reuse=self._reuse, limit=self._batch, sandbox=self.sandbox
        )
        futures = [UnitFuture(self._sup, record.id) for record in records]
        with self._lock:
            self._outstanding.update(futures)
        self._resolver.start()
        for future in futures:
            future.add_done_callback(self._forget)
            batch_requests.on_end(self._sup, future.id, self._ended(future))
        return futures

    def _ended(self, future: UnitFuture) -> Callable[[WorkRecord | None], None]:
        def ended(record: WorkRecord | None) -> None:
            # The supervisor actor's thread (or a reader's): queue only, never block.
            self._resolver.put(future, record)

        return ended

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._outstanding.discard(future)
            last = self._shutdown and not self._outstanding
        if last:
            self._resolver.stop()

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items, one unit per call, all submitted now as one batch.

        Results come in order; a failure raises at its place; ``timeout`` counts
        from this call for the whole map (TimeoutError). Leaving the iterator
        early kills the units whose results were not read.
        """
        if isinstance(chunksize, bool) or not isinstance(chunksize, int) or chunksize < 1:
            raise SpecError("chunksize must be >= 1.")  # the stdlib's words
        timeout = wait_timeout(timeout)
        end = None if timeout is None else time.monotonic() + timeout
        futures = self._submit_calls([(fn, args, {}) for args in zip(*iterables, strict=False)])
        return self._results(futures, end)

    def _results(self, futures: list[UnitFuture], end: float | None) -> Generator[Any, None, None]:
        futures.reverse()  # popped from the end
        try:
            while futures:
                # Yielded straight from the call: no frame here holds a result the
                # caller has dropped (nor its future, which holds it too).
                yield _next_result(futures, end)
        finally:
            self._abandon(futures)

    def _abandon(self, futures: list[UnitFuture]) -> None:
        """Kill the units of results nobody will read; a pending one is withdrawn (cancelled)."""
        left = [f for f in futures if not f.done()]
        if not left:
            return
        for future in left:
            future._withdrawing = True
        try:
            withdrawn = batch_requests.withdraw_pending(self._sup, tuple(f.id for f in left))
            for future, was_pending in zip(left, withdrawn, strict=True):
                if was_pending:
                    future._cancelled_here()
                else:
                    future._withdrawing = False
                    self._sup.kill(future.id)
        except SupervisorClosed:
            return  # its close ended every unit

    # -- shutting down ---------------------------------------------------------------

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more submits (RuntimeError); ``cancel_futures`` cancels the tasks whose units
        have not started; ``wait`` waits for the rest to end. The supervisor runs on."""
        with self._lock:
            self._shutdown = True
            outstanding = list(self._outstanding)
            if not outstanding:
                self._resolver.stop()
        if cancel_futures and outstanding:
            pending = [f for f in outstanding if not f.done()]
            for future in pending:
                future._withdrawing = True
            try:
                withdrawn = batch_requests.withdraw_pending(self._sup, tuple(f.id for f in pending))
            except SupervisorClosed:
                withdrawn = [False] * len(pending)
            for future, was_pending in zip(pending, withdrawn, strict=True):
                if was_pending:
                    future._cancelled_here()
                else:
                    future._withdrawing = False
        if wait:
            wait_futures(outstanding)


class AgentExecutor(UnitExecutor):
    """Isolated agents (a process each), ``max_workers`` at once; made by ``sup.executor()``."""


def machine_parallelism() -> int:
    """How many processors this process may run on: the default ``max_workers``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: what the machine has
        return os.cpu_count() or 1


__all__ = ["AgentExecutor", "CancelledError", "UnitExecutor", "UnitFuture"]
