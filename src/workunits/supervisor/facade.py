"""``Supervisor``: the in-process surface, over the SupervisorActor.

Its verbs (``shell``, ``get``, ``wait``... and their ``_async`` twins) are
written once, for every surface, in ``workunits._surface``, and generated onto
``SupervisorVerbs``; this class is their transport -- each verb's operation as
an ask of the actor (``supervisor.operations``) -- and the supervisor's own
life: start-up, the event feed for the HTTP API, shutdown. It composes a
``Machinery`` (the ledger, zygote, Reaper and actor it runs on), an
``ActorChannel`` (every call is a typed ``Request`` asked with a timeout),
``TerminalWaiters`` for waits, and ``TeammateCalls`` for messages to
teammates. Every method runs in the caller's thread.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from workunits._core import ids
from workunits._core.clock import Clock, SystemClock
from workunits._core.errors import (
    NotFinished,
    SpecError,
    SupervisorClosed,
    UnknownWork,
)
from workunits._core.mailbox import Mailbox
from workunits._core.record import WorkRecord
from workunits._core.retain import HeldRetains
from workunits._core.sandbox import Sandbox
from workunits._core.seconds import seconds, seconds_or_none
from workunits._core.status import is_terminal
from workunits._ledger import SupervisorLock, secretfile, statedir
from workunits._ledger.backend import is_url
from workunits._ledger.sessions import DEFAULT_LEASE as DEFAULT_SESSION_LEASE
from workunits._ledger.sessions import MIN_LEASE, check_advertise
from workunits._ledger.sqlite.db import sync_level
from workunits._ledger.store import DEFAULT_EXPIRE_AFTER
from workunits._ray.runtime import RayRuntime
from workunits._sandbox.isolation import check_mode
from workunits._surface import batch, ops
from workunits._surface._generated import SupervisorVerbs
from workunits._surface.output_stream import STREAM_CHUNK, AsyncOutputStream, OutputStream
from workunits._surface.submission import Submission
from workunits._wire.results import result_of
from workunits._wire.specs import check_bytes
from workunits._zygote import nofile
from workunits.actors.base import WorkActor
from workunits.supervisor import batch_requests
from workunits.supervisor import cleanup as _cleanup
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.eviction import DEFAULT_MAX_RESIDENT_ENDED
from workunits.supervisor.actor.kinds import concurrency_by_name
from workunits.supervisor.events import CHUNK, Cursor, EventBatch, EventFeed
from workunits.supervisor.executor import AgentExecutor, UnitExecutor, machine_parallelism
from workunits.supervisor.handle import WorkHandle
from workunits.supervisor.http_consumers import HttpConsumers
from workunits.supervisor.machinery import Machinery, Options
from workunits.supervisor.operations import ask_for, register
from workunits.supervisor.pool import QUEUED_PER_WORKER, Pool
from workunits.supervisor.shutdown import end_all_work
from workunits.supervisor.teammate import TeammateHandle
from workunits.supervisor.teammate_calls import TeammateCalls
from workunits.supervisor.waiters import TerminalWaiters, settled

R = TypeVar("R")
log = logging.getLogger(__name__)

DEFAULT_EVICTION_GRACE = 30.0


def _on_event_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _raise_nofile_limit() -> None:
    """Each running unit holds descriptors here (a pidfd, its output file, a channel):
    raise the soft limit to the hard one, and say so. Units get the old one back."""
    raised = nofile.raise_for_supervisor()
    if raised is not None:
        log.info(
            "raised the soft RLIMIT_NOFILE from %d to %d (its hard limit) for the "
            "descriptors running units hold; units start with %d, as before",
            *raised,
            raised[0],
        )


class Supervisor(SupervisorVerbs):
    """Runs work units under one supervisor actor. Use as a context manager.

    ``clock`` and ``tick_interval=None`` exist for tests: with a manual clock and
    no ticker, deadlines and eviction run only when ``tick()`` is called.

    Remote units (``remote()``, ``teammate(..., remote=True)``) run on Ray:
    ``ray_address=None`` starts a local Ray at the first one (its files under
    ``ray_temp_dir``, by default ``<state_dir>/ray``), ``"auto"`` or an address
    joins a cluster. ``ray_init`` adds keywords for ``ray.init`` (``runtime_env``,
    ``num_cpus``…). A Ray this process had already initialised is used as it is.

    On an event loop, use ``async with wu.Supervisor(...) as sup:``. Made on a
    thread that runs an event loop, the constructor only checks its arguments
    and the start-up (state dir, ledger, zygote, recovery: a few hundred ms)
    waits for ``__aenter__``, which runs it on a worker thread; ``__aexit__``
    closes on one. A blocking call (``with``, ``sup.get()``…) made first starts
    it there and then. Made anywhere else, the constructor starts it, as ever.
    Every call has an ``_async`` twin that never blocks the loop.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str] = ".workunits",
        *,
        eviction_grace: float = DEFAULT_EVICTION_GRACE,
        clock: Clock | None = None,
        tick_interval: float | None = 0.05,
        shutdown_grace: float = 5.0,
        ask_timeout: float = 30.0,
        install_signal_handlers: bool = True,
        preload: Sequence[str] = (),
        concurrency: Mapping[str, int] | None = None,
        lock_timeout: float = 0.0,
        expire_after: float = DEFAULT_EXPIRE_AFTER,
        ledger_sync: str = "full",
        ledger: str | None = None,
        ray_address: str | None = None,
        ray_temp_dir: str | os.PathLike[str] | None = None,
        ray_init: Mapping[str, Any] | None = None,
        kinds: Mapping[str, type[WorkActor]] | None = None,
        max_resident_ended: int = DEFAULT_MAX_RESIDENT_ENDED,
        pool_size: int = 2,
        session_lease: float = DEFAULT_SESSION_LEASE,
        on_session_lost: Callable[[], None] | None = None,
        secret_file: str | os.PathLike[str] | None = None,
        advertise: str | None = None,
        tracer_provider: Any = None,
        on_sigterm: str = "shutdown",
        on_exit: str = "shutdown",
        isolation: str = "default",
    ) -> None:
        """Open (or create) the state dir and its ledger, and recover what a dead session left.

        One supervisor per state dir: a second one raises SupervisorBusy (after
        waiting ``lock_timeout`` seconds for the first to go). ``concurrency``
        caps running units per kind, by name or letter (``{"agent": 4}``); the
        rest wait pending. A name that is no kind of this supervisor is refused.

        ``ledger_sync="full"`` (the default) fsyncs every submit, terminal write
        and checkpoint before anyone hears of it: they survive a power cut.
        ``"normal"`` skips those fsyncs: still durable against the crash of any
        process (the supervisor's, a client's), not of the OS or the machine, and
        about 0.3-0.5 ms faster per commit on the disks we measured (bench/).

        ``kinds`` adds kinds (``{letter: WorkActor subclass}``) before the
        ledger is recovered, so pending and resumable units of those kinds run.

        An ended unit's record stays in memory until its notice is acknowledged
        and ``eviction_grace`` seconds have passed (and no retain holds it);
        past ``max_resident_ended`` ended records, the oldest leave anyway. Reads
        of a unit that left memory are answered from the ledger.

        ``ledger="postgresql://..."`` keeps the ledger in PostgreSQL (the
        ``[postgres]`` extra); the state dir still holds output files, keys and
        the lock.

        Several supervisors, each with its own state dir, may share one
        PostgreSQL ledger: each claims pending units for its free slots, and
        holds its session as a lease of ``session_lease`` seconds, renewed by
        its heartbeat. When a supervisor's lease lapses another one takes its
        session over and resumes (or fails, reason ``lost``) its units; the
        ledger then refuses every write of the old session, which kills its unit
        processes, starts nothing more and calls ``on_session_lost`` (in the
        actor's thread: keep it short) -- the owner should close it and start
        a new supervisor.

        ``secret_file`` (default: ``$WORKUNITS_SECRET_FILE``) holds the secret
        every host of a shared ledger is given: the key that signs stored specs
        (in place of the state dir's ``secret.key``) and the HTTP API's token.
        ``advertise`` is the URL other hosts reach this supervisor's HTTP API
        at (``serve --advertise``), kept in its session row.

        ``pool_size`` is how many worker processes run pooled units
        (``agent(..., reuse=True)``) at once; they start with the first one.

        ``tracer_provider`` (an OpenTelemetry ``TracerProvider``, the ``[otel]``
        extra) makes each unit a span (``supervisor/actor/tracing.py``); without
        one, the program's global provider, or the ``OTEL_*`` variables, or none.

        ``on_sigterm="deploy"`` makes SIGTERM a deploy, as ``workunits serve``
        does: running units that can resume are handed over to the next
        supervisor (``close(deploy=True)``) instead of killed; SIGINT and SIGHUP
        still end them. ``on_exit="deploy"`` does the same when a ``with`` or
        ``async with`` block exits. Both default to ``"shutdown"``.

        A pooled unit's sandbox is its worker's: each distinct policy gets workers
        of its own.

        ``isolation``: every unit runs under the strongest protection this
        machine gives the supervisor's user (``"default"``): it cannot reach
        the state dir, the runtime's secrets, or any process outside its own
        tree; a ``sandbox=wu.Sandbox(...)`` on a submit narrows it further.
        What the machine cannot give is said once on stderr (and by
        ``workunits doctor``); ``"required"`` refuses to start without all of
        it (SandboxUnavailable); ``"off"`` confines no unit.
        """
        for name, value in (("on_sigterm", on_sigterm), ("on_exit", on_exit)):
            if value not in CLOSE_MODES:
                raise SpecError(f"{name} must be one of {list(CLOSE_MODES)}, got {value!r}")
        self._on_sigterm = on_sigterm
        self._on_exit = on_exit
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise SpecError(f"pool_size must be an int >= 1, got {pool_size!r}")
        self._pool_size = pool_size
        seconds("eviction_grace", eviction_grace, zero=True)
        seconds_or_none(
            "tick_interval", tick_interval, none="no ticks: Supervisor.tick() runs them"
        )
        concurrency = concurrency_by_name(concurrency, kinds or {})
        if (
            isinstance(max_resident_ended, bool)
            or not isinstance(max_resident_ended, int)
            or max_resident_ended < 0
        ):
            raise SpecError(f"max_resident_ended must be an int >= 0, got {max_resident_ended!r}")
        seconds("session_lease", session_lease, least=MIN_LEASE)
        sync_level(ledger_sync, "ledger_sync")  # refused before the state dir is touched
        if ledger is not None and not is_url(ledger):
            raise SpecError(f"ledger must be a postgresql:// URL or None, got {ledger!r}")
        secret = secretfile.resolve(secret_file)  # refused before the state dir is touched
        isolation = check_mode(isolation)
        if advertise is not None:
            advertise = check_advertise(advertise)
        self.state_dir = Path(state_dir)  # made absolute and checked by the start-up
        self._shutdown_grace = shutdown_grace
        self._signals = install_signal_handlers
        self._closed = False
        # Guards _closed and _closing_thread: a check and two assignments, O(1).
        self._close_lock = threading.Lock()
        self._closing_thread: threading.Thread | None = None
        self._close_done = threading.Event()  # set when the first close() has finished
        self._waiters = TerminalWaiters()
        self._held = HeldRetains()  # leases retain() gave out: release(id) ends them

        def start_up() -> None:
            self._start_up(
                state_dir,
                lock_timeout,
                lambda checked: Options(
                    eviction_grace=eviction_grace,
                    clock=clock or SystemClock(),
                    tick_interval=tick_interval,
                    ask_timeout=ask_timeout,
                    preload=preload,
                    extra_kinds=kinds or {},
                    concurrency=concurrency,
                    tracer_provider=tracer_provider,
                    max_resident_ended=max_resident_ended,
                    expire_after=expire_after,
                    ledger_sync=ledger_sync,
                    ledger=ledger,
                    pool_size=pool_size,
                    session_lease=float(session_lease),
                    on_session_lost=on_session_lost,
                    secret=secret,
                    advertise=advertise,
                    isolation=isolation,
                    ray=RayRuntime(
                        address=ray_address,
                        temp_dir=Path(ray_temp_dir or checked / "ray").absolute(),
                        init_options=ray_init,
                    ),
                ),
            )

        # The start-up touches the disk, waits for the state dir's lock and starts
        # threads: 180-330 ms. On a thread that runs an event loop it waits for
        # __aenter__, which runs it on a worker thread (or for the first blocking
        # call, which runs it there and then, as a constructor would have).
        # Serialises that one start-up; held across it, never by anything else.
        self._start_lock = threading.Lock()
        self._pending_start: Callable[[], None] | None = start_up
        self._start_failed = False
        if not _on_event_loop_thread():
            self._ensure_started()

    def _start_up(
        self,
        state_dir: str | os.PathLike[str],
        lock_timeout: float,
        options_for: Callable[[Path], Options],
    ) -> None:
        """Open the state dir, its ledger and the runtime; recover. Any thread, once."""
        self.state_dir = statedir.prepare(state_dir)  # StateDirError when unsafe or read-only
        self._state_dir_lock = SupervisorLock(self.state_dir)
        self._state_dir_lock.acquire(timeout=lock_timeout)
        try:
            self._open(options_for(self.state_dir))
        except BaseException:
            self._state_dir_lock.release()
            raise

    def _open(self, options: Options) -> None:
        _raise_nofile_limit()
        self._machinery = Machinery(self.state_dir, options)
        self.session = self._machinery.session
        self._channel = channel = self._machinery.channel
        self._teammates = TeammateCalls(channel)
        channel.ask(rq.Subscribe(self._waiters.on_change))
        channel.ask(rq.SubscribeStops(self._waiters.on_stopped))
        # What a dead session left: resumed and lost units, adopted pending ones.
        self.recovered: dict[str, list[str]] = channel.ask(rq.Recover())
        if options.advertise is not None:
            self.advertise(options.advertise)

    def _run_pending_start(self) -> bool:
        """Run the deferred start-up if it has not run; True if this call ran it."""
        with self._start_lock:
            start_up = self._pending_start
            if start_up is None:
                if self._start_failed:
                    raise SupervisorClosed("the supervisor did not start (see the first error)")
                return False
            try:
                start_up()
            except BaseException:
                self._start_failed = True
                raise
            finally:
                # Cleared only now: the lock-free check in _ensure_started must not
                # see a supervisor as started while its start-up still runs.
                self._pending_start = None
        return True

    def _abandon_start(self) -> bool:
        """For ``close()``: True if the supervisor never started (nothing runs to end)."""
        with self._start_lock:
            never = self._pending_start is not None or self._start_failed
            self._pending_start = None
            self._start_failed = self._start_failed or never
        return never

    def _ensure_started(self) -> None:
        """Start now if the start-up was deferred (blocking); then watch for exit and signals.

        The cleanup is registered in the calling thread: signal handlers can only
        be installed from the main thread, never from a worker.
        """
        if self._pending_start is None and not self._start_failed:
            return  # started: the common case, without the lock
        if self._run_pending_start():
            _cleanup.track(self, signals=self._signals)

    async def __aenter__(self) -> Supervisor:
        """Start (on a worker thread, off the event loop) and return the supervisor."""
        if await asyncio.to_thread(self._start_and_track):
            _cleanup.track(self, signals=self._signals)  # the loop's thread: O(1) work
        return self

    def _start_and_track(self) -> bool:
        """The start-up for ``__aenter__``, closed at exit even if nobody awaits it.

        A cancelled ``await`` does not stop the thread: the start-up finishes,
        and its work must still end at exit. Signal handlers are installed by
        the loop's thread after the await (only the main thread may).
        """
        ran = self._run_pending_start()
        if ran:
            _cleanup.track(self, signals=False)
        return ran

    async def __aexit__(self, *exc: object) -> None:
        """``aclose()``: a deploy with ``on_exit="deploy"``, else a shutdown."""
        await self.aclose(deploy=self._on_exit == "deploy")

    async def aclose(self, *, deploy: bool = False) -> None:
        """``close(deploy=)`` on a worker thread: ending (or handing over) the work
        waits up to the shutdown grace, and never blocks the event loop."""
        await asyncio.to_thread(self.close, deploy=deploy)

    def _ask(self, request: rq.Request[R]) -> R:
        """The supervisor actor's answer to ``request`` (SupervisorClosed once closed)."""
        self._ensure_started()
        return self._channel.ask(request)

    async def _ask_async(self, request: rq.Request[R]) -> R:
        """``_ask`` for an event loop: no thread waits for the answer (see ``ActorChannel``)."""
        if self._pending_start is not None or self._start_failed:
            await self.__aenter__()
        return await self._channel.ask_async(request)

    # -- the transport of its verbs (``workunits._surface``): asks of the actor ----------

    def _run(self, op: ops.Op[R]) -> R:
        request, answer = ask_for(op)
        return answer(self._ask(request))

    async def _run_async(self, op: ops.Op[R]) -> R:
        request, answer = ask_for(op)
        return answer(await self._ask_async(request))

    def _submit(self, submission: Submission) -> WorkHandle:
        record, created = self._ask(register(submission))
        return WorkHandle(self, record.id, created=created)

    async def _submit_async(self, submission: Submission) -> WorkHandle:
        registered = await self._ask_async(await _built_off_the_loop(submission))
        return WorkHandle(self, registered.record.id, created=registered.created)

    def _submit_teammate(self, submission: Submission) -> TeammateHandle:
        record, created = self._ask(register(submission))
        return TeammateHandle(self, record.id, submission.target, created=created)

    async def _submit_teammate_async(self, submission: Submission) -> TeammateHandle:
        registered = await self._ask_async(await _built_off_the_loop(submission))
        record = registered.record
        return TeammateHandle(self, record.id, submission.target, created=registered.created)

    def _handle(self, submitted: ops.Submitted) -> WorkHandle:
        return WorkHandle(self, submitted.id, created=submitted.created)

    def _wait(self, work_id: str, timeout: float | None) -> WorkRecord:
        waiter = self._waiters.add(work_id)
        try:
            # A unit known not ended has its end still to come, which wakes us: no read.
            if not waiter.unended or self._channel.closed:
                record = self.get(work_id)
                if settled(record):
                    return record
            if waiter.event.wait(timeout) and waiter.record is not None:
                return waiter.record
            record = self.get(work_id)
            if settled(record):  # it ended between the timeout and this read
                return record
            raise NotFinished(record, timeout)
        finally:
            self._waiters.discard(work_id, waiter)

    async def _wait_async(self, work_id: str, timeout: float | None) -> WorkRecord:
        """No thread waits: the unit's end resolves an asyncio future from the actor's thread."""
        waiter, fut = self._waiters.add_async(work_id)  # register, then read
        try:
            # A unit known not ended has its end still to come, which resolves fut: no read.
            if not waiter.unended or self._channel.closed:
                record = await self._ask_async(rq.Get(work_id))
                if settled(record):
                    return record
            try:
                async with asyncio.timeout(timeout):
                    return await fut
            except TimeoutError:
                record = await self._ask_async(rq.Get(work_id))
                if settled(record):  # it ended between the timeout and this read
                    return record
                raise NotFinished(record, timeout) from None
        finally:
            self._waiters.discard(work_id, waiter)

    def _result(self, work_id: str, timeout: float | None) -> Any:
        return result_of(self._wait(work_id, timeout))

    async def _result_async(self, work_id: str, timeout: float | None) -> Any:
        # Decoded on a worker thread: unpickling may import modules.
        return await asyncio.to_thread(result_of, await self._wait_async(work_id, timeout))

    def pool(self, max_workers: int | None = None, *, sandbox: Sandbox | None = None) -> Pool:
        """This supervisor's pooled workers as a ``concurrent.futures.Executor``.

        What ``reuse=True`` does, shaped for code written for
        ``ProcessPoolExecutor``: ``pool.map(fn, items)`` runs one pooled agent
        unit per item on the ``pool_size`` workers, submitted as one batch;
        ``pool.submit`` returns a ``Future`` whose ``id`` is the unit's (see the
        guide "pooled units"). ``max_workers`` caps how many of its units are
        started at once (default 4 per worker); ``sandbox`` is every unit's policy
        (units of a policy of their own run on workers of that policy).
        """
        return Pool(self, self._pool_size, max_workers, sandbox=sandbox)

    def executor(
        self, max_workers: int | None = None, *, sandbox: Sandbox | None = None
    ) -> AgentExecutor:
        """Isolated agents (a process each) as a ``concurrent.futures.Executor``.

        ``submit`` returns a ``Future`` whose ``id`` is its unit's; ``map``
        submits one batch. At most ``max_workers`` of its units run at once
        (default: the processors this process may use); the rest wait
        ``pending``, each already a unit with its ledger row.
        """
        workers = machine_parallelism() if max_workers is None else max_workers
        return AgentExecutor(self, workers, sandbox=sandbox)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        max_workers: int | None = None,
        reuse: bool = False,
        sandbox: Sandbox | None = None,
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items, one agent unit per call, as ``Executor.map``.

        All are submitted now, as one batch (one ledger transaction); results
        come in order and a failure raises at its place; ``timeout`` counts for
        the whole map. At most ``max_workers`` run at once (default: the
        processors this process may use; with ``reuse=True``, pooled units, 4
        per worker of the pool). Leaving the loop early kills the rest. ``sandbox``
        is every unit's policy.
        """
        executor: UnitExecutor = (
            self.pool(max_workers, sandbox=sandbox)
            if reuse
            else self.executor(max_workers, sandbox=sandbox)
        )
        try:
            return executor.map(fn, *iterables, timeout=timeout)
        finally:
            executor.shutdown(wait=False)

    def _submit_batch(
        self, submissions: builtins.list[Submission], max_workers: int | None
    ) -> builtins.list[WorkHandle | BaseException]:
        answers = self._ask(
            batch_requests.request(submissions, batch_requests.limit_of(max_workers))
        )
        return [a if isinstance(a, BaseException) else WorkHandle(self, a.id) for a in answers]

    async def _submit_batch_async(
        self, submissions: builtins.list[Submission], max_workers: int | None
    ) -> builtins.list[WorkHandle | BaseException]:
        """Each spec built on a worker thread: pickling may import."""
        records = await batch_requests.records_async(self, submissions, max_workers)
        return [a if isinstance(a, BaseException) else WorkHandle(self, a.id) for a in records]

    async def map_async(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        max_workers: int | None = None,
        reuse: bool = False,
        sandbox: Sandbox | None = None,
    ) -> AsyncGenerator[Any, None]:
        """Like ``map``, as an async iterator: ``async for value in sup.map_async(...)``.
        Submitted as one batch at the first ``__anext__``; leaving early kills the rest."""
        end = batch.deadline(timeout)
        if max_workers is None:
            max_workers = QUEUED_PER_WORKER * self._pool_size if reuse else machine_parallelism()
        calls = batch.calls_of(fn, iterables)
        handles = await self.submit_many_async(
            calls, reuse=reuse, max_workers=max_workers, sandbox=sandbox
        )
        done = 0
        try:
            for handle in handles:
                left = None if end is None else max(0.0, end - time.monotonic())
                value = await handle.result_async(timeout=left)
                done += 1
                yield value
        finally:
            for handle in handles[done:]:
                with contextlib.suppress(SupervisorClosed):
                    await handle.kill_async()

    def _stream(self, work_id: str, follow: bool, poll: float) -> OutputStream:
        """Retained from this call (not from the first ``next()``) until the stream ends
        or is closed, so the unit's end cannot cut off unread output."""
        self._ask(rq.RetainUnit(work_id))
        return OutputStream(
            work_id,
            poll,
            read=lambda: self._ask(rq.ReadOutput(work_id, STREAM_CHUNK)),
            wait_a_little=lambda delay: self._waiters.wait_a_little(work_id, delay, self.get),
            release=lambda: self._channel.post(rq.Release(work_id)),
            follow=follow,
        )

    def _stream_async(self, work_id: str, follow: bool, poll: float) -> AsyncOutputStream:
        """No thread waits while the unit is quiet: its end wakes the stream from the
        supervisor's thread. The unit is retained from this call (a message posted
        without waiting) until the stream ends or ``aclose()`` is awaited."""
        retained = self._pending_start is None and not self._start_failed
        if retained:
            self._channel.post(rq.RetainUnit(work_id))  # the actor applies it before any read

        async def begin() -> None:
            nonlocal retained
            if not retained:
                await self._ask_async(rq.RetainUnit(work_id))
                retained = True

        def release() -> None:
            if retained:
                self._channel.post(rq.Release(work_id))

        return AsyncOutputStream(
            work_id,
            poll,
            begin=begin,
            read=lambda: self._ask_async(rq.ReadOutput(work_id, STREAM_CHUNK)),
            wait_a_little=lambda delay: self._waiters.wait_a_little_async(
                work_id, delay, self.get_async
            ),
            release=release,
            follow=follow,
        )

    def _notifications(self, lease: float) -> Mailbox:
        return self._ask(rq.MailboxOf(None))

    async def _notifications_async(self, lease: float) -> Mailbox:
        return await self._ask_async(rq.MailboxOf(None))

    def _ask_teammate(self, work_id: str, message: Any, timeout: float | None) -> Any:
        self._ensure_started()
        return self._teammates.ask(work_id, message, timeout)

    async def _ask_teammate_async(self, work_id: str, message: Any, timeout: float | None) -> Any:
        if self._pending_start is not None or self._start_failed:
            await self.__aenter__()
        return await self._teammates.ask_async(work_id, message, timeout)

    def _drain(self, timeout: float) -> builtins.list[str]:
        deadline = time.monotonic() + timeout
        still: builtins.list[str] = []
        for work_id in self._ask(rq.Drain()):
            waiter = self._waiters.add(work_id)  # register, then read: no lost wake-up
            try:
                try:
                    record = self.get(work_id)
                except UnknownWork:
                    continue  # ended and evicted already
                remaining = max(0.0, deadline - time.monotonic())
                if not is_terminal(record.status) and not waiter.event.wait(remaining):
                    still.append(work_id)
            finally:
                self._waiters.discard(work_id, waiter)
        return still

    # -- its own: no twins -------------------------------------------------------------

    def resident_ids(self) -> set[str]:
        """IDs whose records are in memory (the rest only the ledger still answers for)."""
        return self._ask(rq.ResidentIds())

    def ask_future(self, work_id: str, message: Any) -> Future[Any]:
        """Like ``ask``, returning at once; the future is resolved in the answer thread."""
        self._ensure_started()
        return self._teammates.ask_future(work_id, message)

    def tick(self) -> int:
        """Run due deadlines and the eviction sweep now; returns how many records left memory."""
        return self._ask(rq.TickNow())

    # -- followers: the HTTP API's event streams, claims and leases -------------

    _feed: EventFeed | None = None
    _feed_lock = threading.Lock()  # only guards creating ``_feed``, once per supervisor

    def events(
        self, work_id: str, after: str | Cursor | None = None, max_bytes: int = CHUNK
    ) -> EventBatch:
        """The unit's status, progress and output events after cursor ``after``.

        Resumable from any event's cursor with nothing lost or repeated; does not
        move the record's output offset (``supervisor/events.py``).
        """
        ids.validate(work_id)
        check_bytes("max_bytes", max_bytes)
        cursor = Cursor.parse(after) if isinstance(after, str) else after
        return self._event_feed().read(work_id, cursor, max_bytes)

    @property
    def event_feed(self) -> EventFeed:
        """The journal ``events`` reads: ``listen(id, fn)`` wakes a follower at each change."""
        return self._event_feed()

    def _event_feed(self) -> EventFeed:
        with self._feed_lock:
            if self._feed is None:
                feed = EventFeed(self.state_dir, self.get)
                self._ask(rq.Subscribe(feed.on_change))
                self._ask(rq.SubscribeCheckpoints(feed.on_checkpoint))
                self._feed = feed
            return self._feed

    @property
    def http_consumers(self) -> HttpConsumers:
        """Notice claims and retain leases for the HTTP API's consumers (not local processes)."""
        return HttpConsumers(self._machinery.ledger)

    def advertise(self, url: str) -> None:
        """Record in this session's row the URL its HTTP API is reached at from other hosts.

        A client on the same PostgreSQL ledger in another host reads a running
        unit's output through it (``serve`` does this with ``--advertise``, or
        its ``--http`` address). SpecError unless an ``http(s)://host:port`` URL.
        """
        self._ensure_started()
        self._machinery.ledger.sessions.advertise(self.session, check_advertise(url))

    # -- shutdown --------------------------------------------------------------

    def close(self, *, deploy: bool = False) -> None:
        """Kill running work (reason ``shutdown``), stop every actor and thread. Idempotent.

        ``deploy=True`` (what ``workunits serve`` does on SIGTERM): resumable
        units and pending ones are stopped without ending them in the ledger,
        so the next supervisor on this state dir resumes or starts them. Each
        running one is asked to stop as a cancel asks (an agent stops at its
        next checkpoint, which is saved), and ``close`` returns as soon as all
        have stopped; ``shutdown_grace`` is the most it waits before killing
        the rest. Their attempt is logged ``handed-over``: the next supervisor
        resumes them as their next attempt, which counts as no failure against
        ``max_attempts``.
        """
        if self._abandon_start():
            with self._close_lock:
                self._closed = True
            return
        with self._close_lock:
            closed, self._closed = self._closed, True
            self._channel.closed = True  # no call but close()'s own from here on
            closer = self._closing_thread
            if not closed:
                self._closing_thread = threading.current_thread()
        if closed:
            # Another thread (the cleanup thread, after a signal) is closing: wait
            # for it, so that an exit after this call finds the work dead.
            if closer is not threading.current_thread():
                self._close_done.wait()
            return
        try:
            self._close_once(deploy)
        finally:
            self._close_done.set()
            # Only now: an exit while this close runs (in a daemon thread, or the
            # cleanup thread after a signal) must find it, and wait for it.
            _cleanup.untrack(self)

    def _close_once(self, deploy: bool) -> None:
        try:
            end_all_work(self._channel, self._waiters, deploy=deploy, grace=self._shutdown_grace)
        except SupervisorClosed:
            pass
        finally:
            self._machinery.close(after_actor=self._after_actor)
            self._state_dir_lock.release()

    def _after_actor(self) -> None:
        """Once the actor has stopped: every future is resolved, so the relays can end."""
        self._waiters.close()  # no end is told any more: a wait reads, and hears we closed
        self._teammates.close()
        self._channel.close_relay()

    def __enter__(self) -> Supervisor:
        self._ensure_started()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(deploy=self._on_exit == "deploy")

    def close_for_signal(self, signum: int) -> None:
        """``close`` for a terminating signal (the cleanup thread's): SIGTERM is a deploy
        when the supervisor was made with ``on_sigterm="deploy"``."""
        self.close(deploy=signum == signal.SIGTERM and self._on_sigterm == "deploy")


# How a close ends the running work: kill it, or hand it over to the next supervisor.
CLOSE_MODES = ("shutdown", "deploy")


async def _built_off_the_loop(submission: Submission) -> rq.Register:
    """``register(submission)`` for an event loop: a shell's spec here (cheap), any other
    on a worker thread, since pickling a call (and importing a reference) can take long."""
    if submission.verb in ("shell", "submit"):
        return register(submission)
    return await asyncio.to_thread(register, submission)
