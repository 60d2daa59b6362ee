"""``Supervisor``: the blocking facade (and async twins) over the SupervisorActor.

One class that composes: a ``Machinery`` (the ledger, zygote, Reaper and actor
it runs on), an ``ActorChannel`` (every call is a typed ``Request``
asked with a timeout), ``TerminalWaiters`` for waits, and ``TeammateCalls``
for messages to teammates. Every method runs in the caller's thread.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime
import logging
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar, overload

from workunits._core import ids
from workunits._core.clock import Clock, SystemClock
from workunits._core.errors import (
    BatchItemsFailed,
    NotFinished,
    SpecError,
    SupervisorClosed,
    UnknownWork,
)
from workunits._core.mailbox import Mailbox
from workunits._core.record import OutputChunk, WorkRecord
from workunits._core.restart import Restart, check_restart
from workunits._core.retain import HeldRetains, Retain
from workunits._core.retry import Retry
from workunits._core.sandbox import Sandbox
from workunits._core.schedule import ScheduleInfo
from workunits._core.seconds import seconds, seconds_or_none, wait_timeout
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger import SupervisorLock, secretfile, statedir
from workunits._ledger.backend import is_url
from workunits._ledger.retains import check_lease
from workunits._ledger.sessions import DEFAULT_LEASE as DEFAULT_SESSION_LEASE
from workunits._ledger.sessions import MIN_LEASE, check_advertise
from workunits._ledger.sqlite.db import sync_level
from workunits._ledger.store import DEFAULT_EXPIRE_AFTER
from workunits._ray.actor import RemoteSpec
from workunits._ray.runtime import RayRuntime, check_available
from workunits._ray.teammate_actor import RemoteTeammateSpec
from workunits._sandbox.isolation import check_mode
from workunits._wire.agent_call import AgentCall
from workunits._wire.frames import encode_message
from workunits._wire.results import result_of
from workunits._wire.specs import (
    DEFAULT_OUTPUT_CAP,
    DEFAULT_RATE_LIMIT,
    AgentSpec,
    MonitorSpec,
    ShellSpec,
    TeammateSpec,
    check_bytes,
)
from workunits._zygote import nofile
from workunits.actors.base import WorkActor
from workunits.supervisor import batch_submit, paging
from workunits.supervisor import cleanup as _cleanup
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor import tracing
from workunits.supervisor.actor.batches import BatchLimit
from workunits.supervisor.actor.eviction import DEFAULT_MAX_RESIDENT_ENDED
from workunits.supervisor.actor.kinds import concurrency_by_name
from workunits.supervisor.events import CHUNK, Cursor, EventBatch, EventFeed
from workunits.supervisor.executor import AgentExecutor, UnitExecutor, machine_parallelism
from workunits.supervisor.handle import WorkHandle
from workunits.supervisor.http_consumers import HttpConsumers
from workunits.supervisor.machinery import Machinery, Options
from workunits.supervisor.pool import QUEUED_PER_WORKER, Pool
from workunits.supervisor.shutdown import end_all_work
from workunits.supervisor.stream import AsyncOutputStream, OutputStream
from workunits.supervisor.teammate import TeammateHandle
from workunits.supervisor.teammate_calls import TeammateCalls
from workunits.supervisor.tree import render_tree
from workunits.supervisor.waiters import TerminalWaiters, settled

R = TypeVar("R")
log = logging.getLogger(__name__)

DEFAULT_EVICTION_GRACE = 30.0
DEFAULT_LEASE = 30.0  # seconds a retain lease lasts unless renewed
# A stream has two chunks alive at its peak: the one the caller still holds and
# the next one being read. 256 KiB keeps that well inside DESIGN section 8's
# 2 MiB budget and still catches up on a backlog at over 1 GiB/s.
STREAM_CHUNK = 256 << 10


def _restart_policy(
    restart: str, max_restarts: int, within: float, *, remote: bool
) -> Restart | None:
    policy = check_restart(restart, max_restarts, within)
    if policy is not None and remote:
        raise SpecError(
            "restart= is for teammates in their own process here, not remote=True ones "
            "(Ray restarts its own actors: use Ray's max_restarts)"
        )
    return policy


def _teammate_spec(
    cls: type[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    memory_limit: int | None,
    remote: bool,
    resources: Mapping[str, float] | None,
) -> TeammateSpec | RemoteTeammateSpec:
    if remote:
        if memory_limit is not None:
            raise SpecError(
                'memory_limit is for local teammates; on Ray ask for resources={"memory": n}'
            )
        check_available()
        return RemoteTeammateSpec.for_class(cls, args, kwargs, resources=resources)
    if resources is not None:
        raise SpecError("resources are for remote teammates (remote=True)")
    # A local teammate's memory limit is its sandbox's (``with_memory``).
    return TeammateSpec.for_class(cls, args, kwargs)


def with_memory(sandbox: Sandbox | None, memory_limit: int | None) -> Sandbox | None:
    """``memory_limit=N``, a spelling of ``Sandbox(memory=N)``, put in ``sandbox``."""
    if memory_limit is None:
        return sandbox
    check_bytes("memory_limit", memory_limit)
    if sandbox is None:
        return Sandbox(memory=memory_limit)
    if not isinstance(sandbox, Sandbox):
        raise SpecError(f"sandbox must be a wu.Sandbox or None, got {type(sandbox).__name__}")
    if not sandbox.confined or sandbox.memory not in (None, memory_limit):
        raise SpecError(
            "give the memory limit once: memory_limit=N is Sandbox(memory=N); "
            f"got memory_limit={memory_limit} with sandbox={sandbox!r}"
        )
    return dataclasses.replace(sandbox, memory=memory_limit)


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


class Supervisor:
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

    # -- submitting ------------------------------------------------------------

    def shell(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        description: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        on_lost: str = "fail",
        key: str | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        log: str | os.PathLike[str] | None = None,
        keep_output: bool = False,
    ) -> WorkHandle:
        """Run ``cmd`` (a string for ``/bin/sh -c``, or an argv list) as a ``b`` unit.

        ``env`` replaces the environment, as in ``subprocess``. Raises only for bad
        arguments; a command that cannot start still gets an ID and ends ``failed``.
        ``on_lost="restart"`` runs it again if its supervisor dies while it runs.
        ``retry=wu.Retry(...)`` runs it again when it exits with a retried code
        (any non-zero one by default); ``stall_after`` sends its parent a
        ``StallEvent`` when it writes nothing for that many seconds.

        The output file is removed at the end, leaving its last 64 KiB in the
        record. ``log="path"`` writes the output into that file instead (a
        relative path is taken from the current directory), which the unit's
        output file names too while it runs; the file stays yours after the end.
        ``keep_output=True`` keeps it in the state dir until the unit expires.
        Later attempts append to it. Give one or the other: a log that cannot be
        written raises SpecError here, or fails the unit before its command runs.
        """
        spec = ShellSpec.build(
            cmd,
            cwd=cwd,
            env=env,
            output_cap=output_cap,
            on_lost=on_lost,
            log=log,
            keep_output=keep_output,
        )
        return self.submit(
            "b",
            spec,
            description=spec.describe() if description is None else description,
            timeout=timeout,
            key=key,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
            sandbox=sandbox,
        )

    def agent(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        key: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        reuse: bool = False,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Run ``fn(*args, **kwargs)`` in its own process as an ``a`` unit.

        The call is pickled here, so an unpicklable callable or argument raises
        SpecError before any ID exists. ``result()`` returns what ``fn`` returned.
        The unit's capture writes no more than ``output_cap`` transcript bytes;
        output past it ends the unit ``killed`` (reason ``output-cap``).
        An agent whose callable is importable (``module:qualname``) is resumable:
        if its supervisor dies, the next one runs it again from its last
        checkpoint, up to ``max_attempts`` (default 3) attempts in all.
        ``retry=wu.Retry(...)`` also runs it again, same ID, after an exception
        the policy names (see the guide "retries and progress").
        ``reuse=True`` runs it in a long-lived worker process of this supervisor's
        pool (``pool_size``) instead: much faster for short work, but module-level
        state may carry over between units (see the guide "pooled units").
        """
        sandbox = with_memory(sandbox, memory_limit)
        spec = AgentSpec.build(fn, args, kwargs, output_cap=output_cap, reuse=reuse)
        return self.submit(
            "a",
            spec,
            description=spec.name if description is None else description,
            timeout=timeout,
            key=key,
            max_attempts=max_attempts,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
            sandbox=sandbox,
        )

    def remote(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        description: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Run ``fn(*args, **kwargs)`` as a Ray task, an ``r`` unit (needs ``workunits[ray]``).

        ``resources`` are Ray's: ``{"CPU": 2, "GPU": 1, "memory": bytes, "custom": 1}``.
        Ray is reached (or started locally, see ``ray_address``) at the first remote
        unit; ``wu.current()`` works inside ``fn``, and its output, progress,
        checkpoints and events stream into the unit's local transcript.
        ``key`` makes the submit idempotent, as for ``submit``.
        """
        check_available()
        spec = RemoteSpec.build(fn, args, kwargs, resources=resources)
        return self.submit(
            "r",
            spec,
            description=spec.name if description is None else description,
            timeout=timeout,
            key=key,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
        )

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
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
    ) -> WorkHandle:
        """Start a unit of any registered kind (by letter) with a kind-specific spec.

        ``key`` makes the submit idempotent: a unit already submitted under it is
        returned, whatever its status; the same key with another spec raises
        IdempotencyConflict. ``retry`` runs failed attempts again (same ID, it
        stays ``running`` between them); ``stall_after`` sends the parent a
        ``StallEvent`` when the unit shows no progress, output or checkpoint
        for that many seconds. ``not_before`` (a ``datetime``, or seconds from
        now) keeps the unit ``pending`` until then; it can be cancelled
        meanwhile, and the delay is in the ledger, so it outlives a restart.
        """
        record = self._ask(
            rq.Register(
                kind,
                spec,
                parent,
                description,
                timeout,
                key,
                max_attempts,
                retry,
                stall_after,
                not_before=not_before,
                trace=tracing.submitter_context(),
                sandbox=sandbox,
            )
        )
        return WorkHandle(self, record.id)

    async def submit_async(
        self,
        kind: str,
        spec: Any,
        *,
        description: str = "",
        parent: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
    ) -> WorkHandle:
        """Like ``submit`` without blocking the event loop; no thread waits for the answer."""
        request = rq.Register(
            kind,
            spec,
            parent,
            description,
            timeout,
            key,
            max_attempts,
            retry,
            stall_after,
            not_before=not_before,
            trace=tracing.submitter_context(),
            sandbox=sandbox,
        )
        return WorkHandle(self, (await self._ask_async(request)).id)

    async def shell_async(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        description: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        on_lost: str = "fail",
        key: str | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        log: str | os.PathLike[str] | None = None,
        keep_output: bool = False,
    ) -> WorkHandle:
        """Like ``shell`` without blocking the event loop."""
        spec = ShellSpec.build(
            cmd,
            cwd=cwd,
            env=env,
            output_cap=output_cap,
            on_lost=on_lost,
            log=log,
            keep_output=keep_output,
        )
        return await self.submit_async(
            "b",
            spec,
            description=spec.describe() if description is None else description,
            timeout=timeout,
            key=key,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
            sandbox=sandbox,
        )

    async def agent_async(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        key: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        reuse: bool = False,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Like ``agent`` without blocking the event loop.

        The call is pickled (and a ``"module:qualname"`` imported) on a worker
        thread, since either can take long; the submit itself goes to the actor
        with no thread waiting for its answer.
        """
        sandbox = with_memory(sandbox, memory_limit)
        spec = await asyncio.to_thread(
            AgentSpec.build, fn, args, kwargs, output_cap=output_cap, reuse=reuse
        )
        return await self.submit_async(
            "a",
            spec,
            description=spec.name if description is None else description,
            timeout=timeout,
            key=key,
            max_attempts=max_attempts,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
            sandbox=sandbox,
        )

    async def remote_async(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        description: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Like ``remote`` without blocking the event loop (pickled on a worker thread)."""
        check_available()
        spec = await asyncio.to_thread(RemoteSpec.build, fn, args, kwargs, resources=resources)
        return await self.submit_async(
            "r",
            spec,
            description=spec.name if description is None else description,
            timeout=timeout,
            key=key,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
        )

    async def dream_async(
        self,
        fn: Callable[..., Any],
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        memory_limit: int | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Like ``dream`` without blocking the event loop (pickled on a worker thread)."""
        sandbox = with_memory(sandbox, memory_limit)
        spec = await asyncio.to_thread(AgentSpec.build, fn, args, kwargs, idle_priority=True)
        name = spec.name if description is None else description
        return await self.submit_async(
            "d",
            spec,
            description=name,
            timeout=timeout,
            key=key,
            not_before=not_before,
            sandbox=sandbox,
        )

    async def workflow_async(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        memory_limit: int | None = None,
        key: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Like ``workflow`` without blocking the event loop (pickled on a worker thread)."""
        sandbox = with_memory(sandbox, memory_limit)
        spec = await asyncio.to_thread(AgentSpec.build, fn, args, kwargs)
        name = spec.name if description is None else description
        return await self.submit_async(
            "w",
            spec,
            description=name,
            timeout=timeout,
            key=key,
            max_attempts=max_attempts,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
            sandbox=sandbox,
        )

    async def monitor_async(
        self,
        source: str | Sequence[str] | Callable[[], Iterable[str | bytes]],
        pattern: str | re.Pattern[str],
        *,
        description: str | None = None,
        rate_limit: float | None = DEFAULT_RATE_LIMIT,
        timeout: float | None = None,
        key: str | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
    ) -> WorkHandle:
        """Like ``monitor`` without blocking the event loop (built on a worker thread)."""
        spec = await asyncio.to_thread(
            MonitorSpec.for_source, source, pattern, rate_limit=rate_limit
        )
        name = spec.name if description is None else description
        return await self.submit_async(
            "m",
            spec,
            description=name,
            timeout=timeout,
            key=key,
            not_before=not_before,
            sandbox=sandbox,
        )

    async def teammate_async(
        self,
        cls: type[Any],
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        memory_limit: int | None = None,
        remote: bool = False,
        resources: Mapping[str, float] | None = None,
        restart: str = "temporary",
        max_restarts: int = 3,
        within: float = 60.0,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> TeammateHandle:
        """Like ``teammate`` without blocking the event loop (pickled on a worker thread)."""
        policy = _restart_policy(restart, max_restarts, within, remote=remote)
        spec = await asyncio.to_thread(
            _teammate_spec,
            cls,
            args,
            kwargs,
            memory_limit=memory_limit,
            remote=remote,
            resources=resources,
        )
        name = spec.name if description is None else description
        if not remote:
            sandbox = with_memory(sandbox, memory_limit)
        request = rq.Register(
            "t",
            spec,
            None,
            name,
            timeout,
            key,
            restart=policy,
            not_before=not_before,
            trace=tracing.submitter_context(),
            sandbox=sandbox,
        )
        record = await self._ask_async(request)
        return TeammateHandle(self, record.id, cls)

    def retry(self, work_id: str) -> WorkHandle:
        """Start a unit that ended ``failed`` or ``killed`` again, as a new unit.

        The new unit has the same spec, ``retry_of`` names the old one, and the
        old one's idempotency key now names the new one; the old unit stays as
        it ended. Retrying it again returns the same new unit. NotRetryable for
        a unit that did not fail, or whose spec is no longer kept.
        """
        return WorkHandle(self, self._ask(rq.RetryUnit(work_id)).id)

    async def retry_async(self, work_id: str) -> WorkHandle:
        """Like ``retry`` without blocking the event loop."""
        return WorkHandle(self, (await self._ask_async(rq.RetryUnit(work_id))).id)

    def signal(self, work_id: str, name: str, value: Any = None) -> bool:
        """Send the signal ``name`` (a JSON ``value``) to a unit that waits or will wait for it.

        Inside the unit, ``ctx.wait_for(name)`` returns the value. Signals of
        one name queue in order; one sent before the unit waits is kept in the
        ledger until it does, across restarts. False, and nothing kept, when
        the unit has ended; UnknownWork for an ID the ledger does not know.
        """
        return self._ask(rq.SignalUnit(work_id, name, value))

    async def signal_async(self, work_id: str, name: str, value: Any = None) -> bool:
        """Like ``signal`` without blocking the event loop."""
        return await self._ask_async(rq.SignalUnit(work_id, name, value))

    def schedule(
        self,
        name: str,
        cron: str,
        kind: str,
        target: Any,
        *args: Any,
        tz: str = "UTC",
        catch_up: str = "skip",
        description: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a unit at each time the cron expression ``cron`` names, in time zone ``tz``.

        ``kind`` is ``"shell"`` (``target`` a command, as for ``shell``),
        ``"agent"`` or ``"workflow"`` (``target`` a callable, called with
        ``args`` and ``kwargs``). A schedule of the same ``name`` is replaced.
        It is kept in the ledger: each firing is a unit under the idempotency
        key ``schedule:<name>:<due time>``, so none fires twice. A firing due
        while no supervisor ran is recorded as missed; with
        ``catch_up="run-once"`` the latest missed one runs at the next start.
        """
        letter, spec = _scheduled_spec(kind, target, args, kwargs)
        options: dict[str, Any] = {"description": description, "timeout": timeout}
        self._ask(rq.AddSchedule(name, cron, letter, spec, tz, catch_up, options))

    async def schedule_async(
        self,
        name: str,
        cron: str,
        kind: str,
        target: Any,
        *args: Any,
        tz: str = "UTC",
        catch_up: str = "skip",
        description: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        """Like ``schedule`` without blocking the event loop (pickled on a worker thread)."""
        letter, spec = await asyncio.to_thread(_scheduled_spec, kind, target, args, kwargs)
        options: dict[str, Any] = {"description": description, "timeout": timeout}
        await self._ask_async(rq.AddSchedule(name, cron, letter, spec, tz, catch_up, options))

    def unschedule(self, name: str) -> bool:
        """Stop the schedule ``name`` (units it started go on); False when there was none."""
        return self._ask(rq.RemoveSchedule(name))

    async def unschedule_async(self, name: str) -> bool:
        """Like ``unschedule`` without blocking the event loop."""
        return await self._ask_async(rq.RemoveSchedule(name))

    def schedules(self) -> builtins.list[ScheduleInfo]:
        """Each schedule by name: its cron, next due time and latest firing (or miss)."""
        return self._ask(rq.ListSchedules())

    async def schedules_async(self) -> builtins.list[ScheduleInfo]:
        """Like ``schedules`` without blocking the event loop."""
        return await self._ask_async(rq.ListSchedules())

    def resident_ids(self) -> set[str]:
        """IDs whose records are in memory (the rest only the ledger still answers for)."""
        return self._ask(rq.ResidentIds())

    def gc(self, older_than: float | None = None) -> int:
        """Expire ended units past their retention; forget those expired ``older_than`` ago."""
        return self._ask(rq.Gc(older_than))

    async def gc_async(self, older_than: float | None = None) -> int:
        """Like ``gc`` without blocking the event loop."""
        return await self._ask_async(rq.Gc(older_than))

    def register_kind(self, letter: str, actor_class: type[WorkActor]) -> None:
        """Add a kind under an unused letter; built-in letters and ``s`` are refused."""
        self._ask(rq.RegisterKind(letter, actor_class))

    async def register_kind_async(self, letter: str, actor_class: type[WorkActor]) -> None:
        """Like ``register_kind`` without blocking the event loop."""
        await self._ask_async(rq.RegisterKind(letter, actor_class))

    # -- reading ---------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        """The unit's current record: from memory, or from the ledger once evicted."""
        return self._ask(rq.Get(work_id))

    def list(
        self,
        status: Status | str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        key: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        order: str = "oldest",
    ) -> list[WorkRecord]:
        """The records in memory and in the ledger, filtered; a page at a time with ``limit``.

        ``status="expired"`` lists the expired units; a status lists the units
        that have it and are not expired. ``key`` is an idempotency key;
        ``created_after`` (inclusive) and ``created_before`` (exclusive) bound
        the submit time (seconds since the epoch); ``search`` matches each of
        its words as the start of a word of the ID, description or key.
        ``limit`` and ``after`` (a unit's ID: the last of the previous page)
        read a page at a time, oldest first (``order="newest"``: newest first).
        Each page reads only its own rows (``supervisor/paging.py``).
        """
        q = paging.query(
            status,
            kind,
            parent,
            limit=limit,
            after=after,
            key=key,
            created_after=created_after,
            created_before=created_before,
            search=search,
            order=order,
        )
        return paging.every(lambda page: self._ask(rq.ListUnits(page)), q)

    async def get_async(self, work_id: str) -> WorkRecord:
        """Like ``get`` without blocking the event loop."""
        return await self._ask_async(rq.Get(work_id))

    async def list_async(
        self,
        status: Status | str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        key: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        order: str = "oldest",
    ) -> builtins.list[WorkRecord]:
        """Like ``list`` without blocking the event loop."""
        q = paging.query(
            status,
            kind,
            parent,
            limit=limit,
            after=after,
            key=key,
            created_after=created_after,
            created_before=created_before,
            search=search,
            order=order,
        )
        return await paging.every_async(lambda page: self._ask_async(rq.ListUnits(page)), q)

    def pool(self, max_workers: int | None = None) -> Pool:
        """This supervisor's pooled workers as a ``concurrent.futures.Executor``.

        What ``reuse=True`` does, shaped for code written for
        ``ProcessPoolExecutor``: ``pool.map(fn, items)`` runs one pooled agent
        unit per item on the ``pool_size`` workers, submitted as one batch;
        ``pool.submit`` returns a ``Future`` whose ``id`` is the unit's (see the
        guide "pooled units"). ``max_workers`` caps how many of its units are
        started at once (default 4 per worker).
        """
        return Pool(self, self._pool_size, max_workers)

    def executor(self, max_workers: int | None = None) -> AgentExecutor:
        """Isolated agents (a process each) as a ``concurrent.futures.Executor``.

        ``submit`` returns a ``Future`` whose ``id`` is its unit's; ``map``
        submits one batch. At most ``max_workers`` of its units run at once
        (default: the processors this process may use); the rest wait
        ``pending``, each already a unit with its ledger row.
        """
        return AgentExecutor(self, machine_parallelism() if max_workers is None else max_workers)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        max_workers: int | None = None,
        reuse: bool = False,
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items, one agent unit per call, as ``Executor.map``.

        All are submitted now, as one batch (one ledger transaction); results
        come in order and a failure raises at its place; ``timeout`` counts for
        the whole map. At most ``max_workers`` run at once (default: the
        processors this process may use; with ``reuse=True``, pooled units, 4
        per worker of the pool). Leaving the loop early kills the rest.
        """
        executor: UnitExecutor = self.pool(max_workers) if reuse else self.executor(max_workers)
        try:
            return executor.map(fn, *iterables, timeout=timeout)
        finally:
            executor.shutdown(wait=False)

    def submit_many(
        self,
        calls: Iterable[AgentCall],
        *,
        reuse: bool = False,
        max_workers: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        max_attempts: int | None = None,
        retry: Retry | None = None,
    ) -> builtins.list[WorkHandle]:
        """Submit agent units as one batch; their handles, in order.

        Every item is checked before anything is written (SpecError or
        WrongType naming the item's index); all rows are then written in one
        synced transaction. An item whose ``key`` was taken returns that unit,
        as ``agent(key=)`` does; one that fails on its own (its key taken with
        other arguments) fails alone: ``BatchItemsFailed`` carries every
        item's handle or error. At most ``max_workers`` of the batch run at
        once (default: no limit of its own, only its kind's ``concurrency``
        and, with ``reuse=True``, the pool's workers).
        """
        shared = batch_submit.Shared(reuse, memory_limit, output_cap, max_attempts, retry)
        batch = None if max_workers is None else BatchLimit(secrets.token_hex(8), max_workers)
        if batch is not None:
            UnitExecutor.check_max_workers(max_workers)
        answers = self._ask(batch_submit.request(calls, shared, batch))
        results: builtins.list[WorkHandle | BaseException] = [
            a if isinstance(a, BaseException) else WorkHandle(self, a.id) for a in answers
        ]
        if any(isinstance(r, BaseException) for r in results):
            raise BatchItemsFailed(results)
        return [r for r in results if isinstance(r, WorkHandle)]

    async def _submit_specs_async(
        self,
        prepared: builtins.list[tuple[str, Any, dict[str, Any]]],
        *,
        max_workers: int | None = None,
    ) -> builtins.list[WorkRecord | BaseException]:
        """Units of any kinds as one batch: ``(letter, spec, options)`` each, the options
        those of ``submit``; per item its record or its own error (the HTTP API's batch)."""
        batch = None
        if max_workers is not None:
            UnitExecutor.check_max_workers(max_workers)
            batch = BatchLimit(secrets.token_hex(8), max_workers)
        trace = tracing.submitter_context()
        items = tuple(
            rq.Register(letter, spec, trace=trace, **options) for letter, spec, options in prepared
        )
        return await self._ask_async(rq.SubmitMany(items, batch))

    async def submit_many_async(
        self,
        calls: Iterable[AgentCall],
        *,
        reuse: bool = False,
        max_workers: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        max_attempts: int | None = None,
        retry: Retry | None = None,
    ) -> builtins.list[WorkHandle]:
        """Like ``submit_many`` without blocking the event loop (the calls are pickled on a
        worker thread)."""
        shared = batch_submit.Shared(reuse, memory_limit, output_cap, max_attempts, retry)
        batch = None
        if max_workers is not None:
            UnitExecutor.check_max_workers(max_workers)
            batch = BatchLimit(secrets.token_hex(8), max_workers)
        calls = builtins.list(calls)
        request = await asyncio.to_thread(batch_submit.request, calls, shared, batch)
        answers = await self._ask_async(request)
        results: builtins.list[WorkHandle | BaseException] = [
            a if isinstance(a, BaseException) else WorkHandle(self, a.id) for a in answers
        ]
        if any(isinstance(r, BaseException) for r in results):
            raise BatchItemsFailed(results)
        return [r for r in results if isinstance(r, WorkHandle)]

    async def map_async(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        max_workers: int | None = None,
        reuse: bool = False,
    ) -> AsyncGenerator[Any, None]:
        """Like ``map``, as an async iterator: ``async for value in sup.map_async(...)``.
        Submitted as one batch at the first ``__anext__``; leaving early kills the rest."""
        timeout = wait_timeout(timeout)
        end = None if timeout is None else time.monotonic() + timeout
        if max_workers is None:
            max_workers = QUEUED_PER_WORKER * self._pool_size if reuse else machine_parallelism()
        calls = [AgentCall(fn, tuple(args)) for args in zip(*iterables, strict=False)]
        handles = await self.submit_many_async(calls, reuse=reuse, max_workers=max_workers)
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

    def _submit_calls(
        self,
        calls: builtins.list[tuple[Callable[..., Any] | str, tuple[Any, ...], dict[str, Any]]],
        *,
        reuse: bool,
        batch: BatchLimit,
    ) -> builtins.list[WorkRecord]:
        """An executor's submits as one batch (``supervisor.executor``); the first item's
        own error raised (an executor's items have no keys: none is expected)."""
        items = (AgentCall(fn, args, kwargs) for fn, args, kwargs in calls)
        answers = self._ask(batch_submit.request(items, batch_submit.Shared(reuse), batch))
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return [a for a in answers if not isinstance(a, BaseException)]

    def _withdraw_pending(self, work_ids: tuple[str, ...]) -> builtins.list[bool]:
        """End the units not yet started ``killed`` (cancelled); per unit, whether it was."""
        return self._ask(rq.WithdrawPending(work_ids))

    def _on_end(self, work_id: str, callback: Callable[[WorkRecord | None], None]) -> None:
        """Call ``callback(record)`` once the unit's end is durable (at once if it is), or
        ``callback(None)`` if the supervisor closes first. It runs in the supervisor
        actor's thread (or this one): it must only hand the record on."""
        waiter = self._waiters.add(work_id, callback, lambda: callback(None))
        if waiter.unended and not self._channel.closed:
            return  # its end is still to come, and will call back
        try:
            record = self.get(work_id)
        except SupervisorClosed:
            self._waiters.discard(work_id, waiter)
            callback(None)
            return
        if settled(record):
            self._waiters.discard(work_id, waiter)
            callback(record)  # may also have been called by the end itself: resolved once

    def tree(self, root: str | None = None) -> str:
        """The units as an indented tree (all top-level units, or ``root`` and its descendants)."""
        if root is not None:
            ids.validate(root)
        return render_tree(self.list(), root)

    async def tree_async(self, root: str | None = None) -> str:
        """Like ``tree`` without blocking the event loop."""
        if root is not None:
            ids.validate(root)
        return render_tree(await self.list_async(), root)

    @overload
    def read_output(
        self, work_id: str, max_bytes: int | None = None, *, offset: None = None
    ) -> bytes: ...

    @overload
    def read_output(
        self, work_id: str, max_bytes: int | None = None, *, offset: int
    ) -> OutputChunk: ...

    def read_output(
        self, work_id: str, max_bytes: int | None = None, *, offset: int | None = None
    ) -> bytes | OutputChunk:
        """The output written since the last read (at most ``max_bytes``, default 1 MiB);
        advances the unit's offset.

        With ``offset``, reads from there instead and returns an ``OutputChunk``
        (the record's own offset is left alone): for an ended unit only its tail
        is still held, and ``chunk.start > offset`` says what the reader missed.
        A unit that has left memory is read from the ledger, where its offset went.
        """
        request = _read_request(work_id, max_bytes, offset)
        if isinstance(request, rq.ReadChunk):
            return self._ask(request)
        data, _ = self._ask(request)
        return data

    def stream(self, work_id: str, *, poll: float = 0.05) -> OutputStream:
        """Yield every byte of output exactly once, until the unit is terminal.

        The unit is retained from this call (not from the first ``next()``) until
        the stream ends or is closed, so its end cannot cut off unread output.
        """
        ids.validate(work_id)
        poll = seconds("poll", poll)
        self._ask(rq.RetainUnit(work_id))
        return OutputStream(
            work_id,
            poll,
            read=lambda: self._ask(rq.ReadOutput(work_id, STREAM_CHUNK)),
            wait_a_little=lambda delay: self._wait_a_little(work_id, delay),
            release=lambda: self._channel.post(rq.Release(work_id)),
        )

    def _wait_a_little(self, work_id: str, delay: float) -> None:
        """Wait up to ``delay`` for the unit to end (more output may come sooner)."""
        waiter = self._waiters.add(work_id)
        try:
            if not is_terminal(self.get(work_id).status):
                waiter.event.wait(delay)
        finally:
            self._waiters.discard(work_id, waiter)

    @overload
    async def read_output_async(
        self, work_id: str, max_bytes: int | None = None, *, offset: None = None
    ) -> bytes: ...

    @overload
    async def read_output_async(
        self, work_id: str, max_bytes: int | None = None, *, offset: int
    ) -> OutputChunk: ...

    async def read_output_async(
        self, work_id: str, max_bytes: int | None = None, *, offset: int | None = None
    ) -> bytes | OutputChunk:
        """Like ``read_output`` without blocking the event loop."""
        request = _read_request(work_id, max_bytes, offset)
        if isinstance(request, rq.ReadChunk):
            return await self._ask_async(request)
        data, _ = await self._ask_async(request)
        return data

    def stream_async(self, work_id: str, *, poll: float = 0.05) -> AsyncOutputStream:
        """Like ``stream``, for ``async for chunk in sup.stream_async(id)``.

        No thread waits while the unit is quiet: its end wakes the stream from
        the supervisor's thread. The unit is retained from this call (a message
        posted without waiting) until the stream ends or ``aclose()`` is awaited.
        """
        ids.validate(work_id)
        poll = seconds("poll", poll)
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
            wait_a_little=lambda delay: self._wait_a_little_async(work_id, delay),
            release=release,
        )

    async def _wait_a_little_async(self, work_id: str, delay: float) -> None:
        waiter, fut = self._waiters.add_async(work_id)
        try:
            if not is_terminal((await self._ask_async(rq.Get(work_id))).status):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await fut
        finally:
            self._waiters.discard(work_id, waiter)

    def retain(self, work_id: str, lease: float = DEFAULT_LEASE) -> Retain:
        """Keep the unit visible while you look at it: a lease of ``lease`` seconds.

        While the lease holds, the unit's record stays in memory after its end
        and its ledger row does not expire. Renew it (``renew()``, or
        ``keep_renewing()``) before it runs out; ``release()`` it, or use it as a
        context manager, when done. It lapses by itself if not renewed, and at
        once if this process exits.
        """
        lease = check_lease(lease)
        return self._retain(work_id, self._ask(rq.TakeLease(work_id, lease)), lease)

    async def retain_async(self, work_id: str, lease: float = DEFAULT_LEASE) -> Retain:
        """Like ``retain`` without blocking the event loop. The lease's ``renew`` and
        ``release`` are short blocking asks: from the loop, run them with
        ``asyncio.to_thread``, or let ``keep_renewing`` renew from its own thread."""
        lease = check_lease(lease)
        return self._retain(work_id, await self._ask_async(rq.TakeLease(work_id, lease)), lease)

    def _retain(self, work_id: str, lease_id: str, lease: float) -> Retain:
        return self._held.hold(
            work_id,
            lease_id,
            lease,
            renew=lambda seconds: self._ask(rq.RenewLease(lease_id, seconds)),
            release=lambda: self._ask(rq.EndLease(work_id, lease_id)),
        )

    def release(self, work_id: str) -> bool:
        """End the retain leases taken on the unit through this supervisor (``retain``)
        and not yet released; True if there was one. ``Retain.release()`` ends one."""
        ids.validate(work_id)
        return self._held.release(work_id)

    async def release_async(self, work_id: str) -> bool:
        """Like ``release`` without blocking the event loop."""
        ids.validate(work_id)
        return await asyncio.to_thread(self._held.release, work_id)

    def notifications(self) -> Mailbox:
        """The application's mailbox: one notice per top-level unit that ends."""
        return self._ask(rq.MailboxOf(None))

    async def notifications_async(self) -> Mailbox:
        """Like ``notifications`` without blocking the event loop (then ``await
        mailbox.get_async()``, ``async with mailbox.take_async()``, ``async for``)."""
        return await self._ask_async(rq.MailboxOf(None))

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

    # -- waiting ---------------------------------------------------------------

    def wait(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal; raise NotFinished after ``timeout``."""
        ids.validate(work_id)
        timeout = wait_timeout(timeout)
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

    def result(self, work_id: str, timeout: float | None = None) -> Any:
        """The unit's result: its record for a shell unit. Raises WorkFailed / WorkKilled."""
        return result_of(self.wait(work_id, timeout))

    async def wait_async(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Like ``wait`` without blocking the event loop, nor a thread: the unit's end
        resolves an asyncio future from the supervisor's thread."""
        ids.validate(work_id)
        timeout = wait_timeout(timeout)
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

    async def result_async(self, work_id: str, timeout: float | None = None) -> Any:
        """Like ``result`` without blocking the event loop (the value is decoded on a
        worker thread: unpickling may import modules)."""
        record = await self.wait_async(work_id, timeout)
        return await asyncio.to_thread(result_of, record)

    # -- ending work -----------------------------------------------------------

    def kill(self, work_id: str) -> bool:
        """SIGKILL the unit's process group now. False if it was not running (a no-op)."""
        return self._ask(rq.KillUnit(work_id, Reason.KILLED))

    def cancel(self, work_id: str, grace: float = 5.0) -> bool:
        """SIGTERM now, SIGKILL after ``grace`` seconds. False if it was not running."""
        return self._ask(rq.CancelUnit(work_id, seconds("grace", grace, zero=True)))

    async def kill_async(self, work_id: str) -> bool:
        """Like ``kill`` without blocking the event loop."""
        return await self._ask_async(rq.KillUnit(work_id, Reason.KILLED))

    async def cancel_async(self, work_id: str, grace: float = 5.0) -> bool:
        """Like ``cancel`` without blocking the event loop."""
        return await self._ask_async(rq.CancelUnit(work_id, seconds("grace", grace, zero=True)))

    def advertise(self, url: str) -> None:
        """Record in this session's row the URL its HTTP API is reached at from other hosts.

        A client on the same PostgreSQL ledger in another host reads a running
        unit's output through it (``serve`` does this with ``--advertise``, or
        its ``--http`` address). SpecError unless an ``http(s)://host:port`` URL.
        """
        self._ensure_started()
        self._machinery.ledger.sessions.advertise(self.session, check_advertise(url))

    # -- time ------------------------------------------------------------------

    def tick(self) -> int:
        """Run due deadlines and the eviction sweep now; returns how many records left memory."""
        return self._ask(rq.TickNow())

    # -- teammates, monitors, dreams, workflows (DESIGN §3) ---------------------

    def teammate(
        self,
        cls: type[Any],
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        memory_limit: int | None = None,
        remote: bool = False,
        resources: Mapping[str, float] | None = None,
        restart: str = "temporary",
        max_restarts: int = 3,
        within: float = 60.0,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> TeammateHandle:
        """Create ``cls(*args, **kwargs)`` in its own process as a ``t`` unit.

        It runs ``on_start()`` if it has one, then takes messages in
        ``on_receive(message)`` (and method calls through ``proxy()``) one at a
        time, until ``stop()``, a cancel or a kill.
        ``remote=True`` puts the instance in a Ray actor (``workunits[ray]``), with
        Ray ``resources`` as for ``remote()``; the handle and its semantics are the same.

        ``restart`` (OTP's restart types): ``"permanent"`` starts it again, same
        ID, next attempt, ``on_start`` again, after any end nobody asked for;
        ``"transient"`` only after it ended ``failed``; ``"temporary"`` (default)
        never. More than ``max_restarts`` restarts within ``within`` seconds and
        it ends ``failed``, reason ``restart-intensity``. ``stop()``, a cancel
        or a kill is never restarted.

        ``key`` makes the submit idempotent, as for ``submit``: a second
        ``teammate`` call under the key returns a handle to the first one.
        """
        policy = _restart_policy(restart, max_restarts, within, remote=remote)
        spec = _teammate_spec(
            cls, args, kwargs, memory_limit=memory_limit, remote=remote, resources=resources
        )
        name = spec.name if description is None else description
        if not remote:
            sandbox = with_memory(sandbox, memory_limit)
        record = self._ask(
            rq.Register(
                "t",
                spec,
                None,
                name,
                timeout,
                key,
                restart=policy,
                not_before=not_before,
                trace=tracing.submitter_context(),
                sandbox=sandbox,
            )
        )
        return TeammateHandle(self, record.id, cls)

    def monitor(
        self,
        source: str | Sequence[str] | Callable[[], Iterable[str | bytes]],
        pattern: str | re.Pattern[str],
        *,
        description: str | None = None,
        rate_limit: float | None = DEFAULT_RATE_LIMIT,
        timeout: float | None = None,
        key: str | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
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
        return self.submit(
            "m",
            spec,
            description=name,
            timeout=timeout,
            key=key,
            not_before=not_before,
            sandbox=sandbox,
        )

    def dream(
        self,
        fn: Callable[..., Any],
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        memory_limit: int | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Run ``fn(*args, **kwargs)`` as an agent at idle CPU priority (a ``d`` unit)."""
        sandbox = with_memory(sandbox, memory_limit)
        spec = AgentSpec.build(fn, args, kwargs, idle_priority=True)
        name = spec.name if description is None else description
        return self.submit(
            "d",
            spec,
            description=name,
            timeout=timeout,
            key=key,
            not_before=not_before,
            sandbox=sandbox,
        )

    def workflow(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        description: str | None = None,
        timeout: float | None = None,
        memory_limit: int | None = None,
        key: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        not_before: float | datetime.datetime | None = None,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Run ``fn(*args, **kwargs)`` as a workflow (``w``): its ``ctx.step()``s run once.

        Resumable when ``fn`` is importable: after a crash the next supervisor
        runs it again and finished steps return their stored results.
        """
        sandbox = with_memory(sandbox, memory_limit)
        spec = AgentSpec.build(fn, args, kwargs)
        name = spec.name if description is None else description
        return self.submit(
            "w",
            spec,
            description=name,
            timeout=timeout,
            key=key,
            max_attempts=max_attempts,
            retry=retry,
            stall_after=stall_after,
            not_before=not_before,
            sandbox=sandbox,
        )

    def shed(self, n: int | None = None) -> builtins.list[str]:
        """Kill up to ``n`` running dreams (all with None), newest first; their IDs.

        They end ``killed`` with reason ``shed``, which tells them apart from an
        explicit kill: shed work is worth resubmitting when the load falls.
        """
        _check_shed(n)
        return self._ask(rq.Shed(n))

    async def shed_async(self, n: int | None = None) -> builtins.list[str]:
        """Like ``shed`` without blocking the event loop."""
        _check_shed(n)
        return await self._ask_async(rq.Shed(n))

    # -- messages to teammates ------------------------------------------------------

    def tell(self, work_id: str, message: Any) -> None:
        """Queue ``message`` for a running teammate; TeammateEnded if it ended or is ending."""
        self._ensure_started()
        self._teammates.tell(work_id, message)

    async def tell_async(self, work_id: str, message: Any) -> None:
        """Like ``tell`` without blocking the event loop."""
        ids.validate(work_id)
        await self._ask_async(rq.SendToTeammate(work_id, encode_message(message), ask=False))

    def ask(self, work_id: str, message: Any, timeout: float | None = None) -> Any:
        """The teammate's answer to ``message``, or the exception its handler raised.

        TeammateEnded if it ends before answering (a kill mid-ask), AskTimeout
        after ``timeout`` seconds (None: until it answers or ends).
        """
        self._ensure_started()
        return self._teammates.ask(work_id, message, timeout)

    def ask_future(self, work_id: str, message: Any) -> Future[Any]:
        """Like ``ask``, returning at once; the future is resolved in the answer thread."""
        self._ensure_started()
        return self._teammates.ask_future(work_id, message)

    async def ask_async(self, work_id: str, message: Any, timeout: float | None = None) -> Any:
        """Like ``ask`` without blocking the event loop."""
        if self._pending_start is not None or self._start_failed:
            await self.__aenter__()
        return await self._teammates.ask_async(work_id, message, timeout)

    def stop(self, work_id: str) -> bool:
        """Ask a teammate to stop after the messages already sent; False if not running."""
        return self._ask(rq.StopTeammateUnit(work_id))

    async def stop_async(self, work_id: str) -> bool:
        """Like ``stop`` without blocking the event loop."""
        return await self._ask_async(rq.StopTeammateUnit(work_id))

    # -- shutdown --------------------------------------------------------------

    def drain(self, timeout: float) -> builtins.list[str]:
        """Stop admitting work, then wait up to ``timeout`` s for the units that cannot resume.

        From this call submits raise SupervisorClosed and nothing more starts
        (pending units stay pending, for the next supervisor). Running units
        that a deploy would end -- those that cannot resume -- get up to
        ``timeout`` seconds to finish; the IDs of those still running after it
        are returned. Follow with ``close(deploy=True)`` (``serve
        --drain-timeout`` does both on SIGTERM).
        """
        deadline = time.monotonic() + seconds("timeout", timeout, zero=True)
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

    async def drain_async(self, timeout: float) -> builtins.list[str]:
        """Like ``drain`` without blocking the event loop (it waits on a worker thread)."""
        return await asyncio.to_thread(self.drain, timeout)

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


def _check_shed(n: object) -> None:
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise SpecError(f"n must be an int >= 0 or None, got {n!r}")


def _scheduled_spec(
    kind: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, Any]:
    """The letter and spec each firing of a schedule of ``kind`` starts."""
    if kind == "shell":
        if args or kwargs:
            raise SpecError("a shell schedule takes one command: no further arguments")
        return "b", ShellSpec.build(target, cwd=None, env=None, output_cap=DEFAULT_OUTPUT_CAP)
    if kind in ("agent", "workflow"):
        return "a" if kind == "agent" else "w", AgentSpec.build(target, args, kwargs)
    raise SpecError(f"a schedule's kind is 'shell', 'agent' or 'workflow', got {kind!r}")


def _read_request(
    work_id: str, max_bytes: int | None, offset: int | None
) -> rq.ReadOutput | rq.ReadChunk:
    """The request ``read_output`` sends: its arguments checked before anything is read."""
    if max_bytes is not None:
        check_bytes("max_bytes", max_bytes)
    if offset is None:
        return rq.ReadOutput(work_id, max_bytes)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise SpecError(f"offset must be an int >= 0, got {offset!r}")
    return rq.ReadChunk(work_id, offset, max_bytes)
