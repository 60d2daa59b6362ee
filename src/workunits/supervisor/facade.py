"""``Supervisor``: the blocking facade (and async twins) over the SupervisorActor.

One class that composes: a ``Runtime`` (the ledger, zygote, Reaper, actor and
Ticker it runs on), an ``ActorChannel`` (every call is a typed ``Request``
asked with a timeout), ``TerminalWaiters`` for waits, and ``TeammateCalls``
for messages to teammates. Every method runs in the caller's thread.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from workunits import _ids
from workunits._clock import Clock, SystemClock
from workunits._errors import NotFinished, SpecError, SupervisorClosed
from workunits._ledger import SupervisorLock, statedir
from workunits._ledger._db import sync_level
from workunits._ledger.backend import is_url
from workunits._ledger.store import DEFAULT_EXPIRE_AFTER
from workunits._mailbox import Mailbox
from workunits._record import WorkRecord
from workunits._remote.runtime import RayRuntime, check_available
from workunits._status import Reason, Status, is_terminal
from workunits._wire.results import result_of
from workunits._wire.specs import (
    DEFAULT_OUTPUT_CAP,
    DEFAULT_RATE_LIMIT,
    AgentSpec,
    MonitorSpec,
    ShellSpec,
    TeammateSpec,
)
from workunits.actors.base import WorkActor
from workunits.actors.remote import RemoteSpec
from workunits.actors.remote_teammate import RemoteTeammateSpec
from workunits.supervisor import cleanup as _cleanup
from workunits.supervisor import requests as rq
from workunits.supervisor.handle import WorkHandle
from workunits.supervisor.runtime import Options, Runtime
from workunits.supervisor.shutdown import end_all_work
from workunits.supervisor.stream import OutputStream
from workunits.supervisor.teammate import TeammateHandle
from workunits.supervisor.teammate_calls import TeammateCalls
from workunits.supervisor.tree import render_tree
from workunits.supervisor.waiters import TerminalWaiters

R = TypeVar("R")

DEFAULT_EVICTION_GRACE = 30.0
# A stream has two chunks alive at its peak: the one the caller still holds and
# the next one being read. 256 KiB keeps that well inside DESIGN section 8's
# 2 MiB budget and still catches up on a backlog at over 1 GiB/s.
STREAM_CHUNK = 256 << 10


def _raise_nofile_limit() -> None:
    # Each running unit holds a pidfd; allow as many as the hard limit permits.
    import resource  # noqa: PLC0415 - only needed once, at the first supervisor

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Supervisor:
    """Runs work units under one supervisor actor. Use as a context manager.

    ``clock`` and ``tick_interval=None`` exist for tests: with a manual clock and
    no ticker, deadlines and eviction run only when ``tick()`` is called.

    Remote units (``remote()``, ``teammate(..., remote=True)``) run on Ray:
    ``ray_address=None`` starts a local Ray at the first one (its files under
    ``ray_temp_dir``, by default ``<state_dir>/ray``), ``"auto"`` or an address
    joins a cluster. ``ray_init`` adds keywords for ``ray.init`` (``runtime_env``,
    ``num_cpus``…). A Ray this process had already initialised is used as it is.
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
    ) -> None:
        """Open (or create) the state dir and its ledger, and recover what a dead session left.

        One supervisor per state dir: a second one raises SupervisorBusy (after
        waiting ``lock_timeout`` seconds for the first to go). ``concurrency``
        caps running units per kind name (``{"agent": 4}``); the rest wait pending.

        ``ledger_sync="full"`` (the default) fsyncs every submit, terminal write
        and checkpoint before anyone hears of it: they survive a power cut.
        ``"normal"`` skips those fsyncs: still durable against the crash of any
        process (the supervisor's, a client's), not of the OS or the machine, and
        about 0.3-0.5 ms faster per commit on the disks we measured (bench/).

        ``kinds`` adds kinds (``{letter: WorkActor subclass}``) before the
        ledger is recovered, so pending and resumable units of those kinds run.

        ``ledger="postgresql://..."`` keeps the ledger in PostgreSQL (the
        ``[postgres]`` extra); the state dir still holds output files, keys and
        the lock.
        """
        if not eviction_grace >= 0:
            raise SpecError(f"eviction_grace must be >= 0 seconds, got {eviction_grace!r}")
        for kind_name, limit in (concurrency or {}).items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise SpecError(f"concurrency[{kind_name!r}] must be an int >= 1, got {limit!r}")
        sync_level(ledger_sync, "ledger_sync")  # refused before the state dir is touched
        if ledger is not None and not is_url(ledger):
            raise SpecError(f"ledger must be a postgresql:// URL or None, got {ledger!r}")
        self.state_dir = statedir.prepare(state_dir)  # StateDirError when unsafe or read-only
        self._state_dir_lock = SupervisorLock(self.state_dir)
        self._state_dir_lock.acquire(timeout=lock_timeout)
        try:
            options = Options(
                eviction_grace=eviction_grace,
                clock=clock or SystemClock(),
                tick_interval=tick_interval,
                ask_timeout=ask_timeout,
                preload=preload,
                extra_kinds=kinds or {},
                concurrency=concurrency,
                expire_after=expire_after,
                ledger_sync=ledger_sync,
                ledger=ledger,
                ray=RayRuntime(
                    address=ray_address,
                    temp_dir=Path(ray_temp_dir or self.state_dir / "ray").absolute(),
                    init_options=ray_init,
                ),
            )
            self._open(options, shutdown_grace=shutdown_grace, signals=install_signal_handlers)
        except BaseException:
            self._state_dir_lock.release()
            raise

    def _open(self, options: Options, *, shutdown_grace: float, signals: bool) -> None:
        self._shutdown_grace = shutdown_grace
        self._closed = False
        # Guards _closed and _closing_thread: a check and two assignments, O(1).
        self._close_lock = threading.Lock()
        self._closing_thread: threading.Thread | None = None
        self._close_done = threading.Event()  # set when the first close() has finished
        _raise_nofile_limit()
        self._runtime = Runtime(self.state_dir, options)
        self.session = self._runtime.session
        self._channel = channel = self._runtime.channel
        self._teammates = TeammateCalls(channel)
        self._waiters = TerminalWaiters()
        channel.ask(rq.Subscribe(self._waiters.on_change))
        # What a dead session left: resumed and lost units, adopted pending ones.
        self.recovered: dict[str, list[str]] = channel.ask(rq.Recover())
        _cleanup.track(self, signals=signals)

    def _ask(self, request: rq.Request[R]) -> R:
        """The supervisor actor's answer to ``request`` (SupervisorClosed once closed)."""
        return self._channel.ask(request)

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
    ) -> WorkHandle:
        """Run ``cmd`` (a string for ``/bin/sh -c``, or an argv list) as a ``b`` unit.

        ``env`` replaces the environment, as in ``subprocess``. Raises only for bad
        arguments; a command that cannot start still gets an ID and ends ``failed``.
        ``on_lost="restart"`` runs it again if its supervisor dies while it runs.
        """
        spec = ShellSpec.build(cmd, cwd=cwd, env=env, output_cap=output_cap, on_lost=on_lost)
        return self.submit(
            "b",
            spec,
            description=spec.describe() if description is None else description,
            timeout=timeout,
            key=key,
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
        """
        spec = AgentSpec.build(fn, args, kwargs, memory_limit=memory_limit, output_cap=output_cap)
        return self.submit(
            "a",
            spec,
            description=spec.name if description is None else description,
            timeout=timeout,
            key=key,
            max_attempts=max_attempts,
        )

    def remote(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        description: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> WorkHandle:
        """Run ``fn(*args, **kwargs)`` as a Ray task, an ``r`` unit (needs ``workunits[ray]``).

        ``resources`` are Ray's: ``{"CPU": 2, "GPU": 1, "memory": bytes, "custom": 1}``.
        Ray is reached (or started locally, see ``ray_address``) at the first remote
        unit; ``wu.current()`` works inside ``fn``, and its output, progress,
        checkpoints and events stream into the unit's local transcript.
        """
        check_available()
        spec = RemoteSpec.build(fn, args, kwargs, resources=resources)
        return self.submit(
            "r",
            spec,
            description=spec.name if description is None else description,
            timeout=timeout,
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
    ) -> WorkHandle:
        """Start a unit of any registered kind (by letter) with a kind-specific spec.

        ``key`` makes the submit idempotent: a unit already submitted under it is
        returned, whatever its status; the same key with another spec raises
        IdempotencyConflict.
        """
        record = self._ask(rq.Register(kind, spec, parent, description, timeout, key, max_attempts))
        return WorkHandle(self, record.id)

    def resident_ids(self) -> set[str]:
        """IDs whose records are in memory (the rest only the ledger still answers for)."""
        return self._ask(rq.ResidentIds())

    def gc(self, older_than: float | None = None) -> int:
        """Expire ended units past their retention; forget those expired ``older_than`` ago."""
        return self._ask(rq.Gc(older_than))

    def register_kind(self, letter: str, actor_class: type[WorkActor]) -> None:
        """Add a kind under an unused letter; built-in letters and ``s`` are refused."""
        self._ask(rq.RegisterKind(letter, actor_class))

    # -- reading ---------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        """The unit's current record: from memory, or from the ledger once evicted."""
        return self._ask(rq.Get(work_id))

    def list(
        self,
        status: Status | str | None = None,
        kind: str | None = None,
        parent: str | None = None,
    ) -> list[WorkRecord]:
        """The records in memory and in the ledger, filtered by status, kind or parent."""
        if status is not None:
            try:
                status = Status(status)
            except ValueError:
                raise SpecError(
                    f"status must be one of {[s.value for s in Status]}, got {status!r}"
                ) from None
        return self._ask(rq.ListUnits(status, kind, parent))

    def tree(self, root: str | None = None) -> str:
        """The units as an indented tree (all top-level units, or ``root`` and its descendants)."""
        return render_tree(self.list(), root)

    def read_output(self, work_id: str, max_bytes: int | None = None) -> bytes:
        """The output written since the last read; advances the unit's offset."""
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise SpecError(f"max_bytes must be a positive int, got {max_bytes!r}")
        data, _ = self._ask(rq.ReadOutput(work_id, max_bytes))
        return data

    def stream(self, work_id: str, *, poll: float = 0.05) -> OutputStream:
        """Yield every byte of output exactly once, until the unit is terminal.

        The unit is retained from this call (not from the first ``next()``) until
        the stream ends or is closed, so its end cannot cut off unread output.
        """
        _ids.validate(work_id)
        self._ask(rq.Retain(work_id))
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

    def retain(self, work_id: str) -> WorkRecord:
        """Hold the record in memory (a viewer is looking at it) until ``release``."""
        return self._ask(rq.Retain(work_id))

    def release(self, work_id: str) -> WorkRecord:
        """Undo one ``retain``; the eviction grace starts again from now."""
        return self._ask(rq.Release(work_id))

    def notifications(self) -> Mailbox:
        """The application's mailbox: one notice per top-level unit that ends."""
        return self._ask(rq.MailboxOf(None))

    # -- waiting ---------------------------------------------------------------

    def wait(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal; raise NotFinished after ``timeout``."""
        _ids.validate(work_id)
        waiter = self._waiters.add(work_id)
        try:
            record = self.get(work_id)
            if is_terminal(record.status):
                return record
            if waiter.event.wait(timeout) and waiter.record is not None:
                return waiter.record
            raise NotFinished(self.get(work_id), timeout)
        finally:
            self._waiters.discard(work_id, waiter)

    def result(self, work_id: str, timeout: float | None = None) -> Any:
        """The unit's result: its record for a shell unit. Raises WorkFailed / WorkKilled."""
        return result_of(self.wait(work_id, timeout))

    async def wait_async(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Like ``wait`` without blocking the event loop."""
        _ids.validate(work_id)
        waiter, fut = self._waiters.add_async(work_id)
        try:
            record = await asyncio.to_thread(self.get, work_id)
            if is_terminal(record.status):
                return record
            try:
                async with asyncio.timeout(timeout):
                    return await fut
            except TimeoutError:
                raise NotFinished(await asyncio.to_thread(self.get, work_id), timeout) from None
        finally:
            self._waiters.discard(work_id, waiter)

    async def result_async(self, work_id: str, timeout: float | None = None) -> Any:
        """Like ``result`` without blocking the event loop."""
        return result_of(await self.wait_async(work_id, timeout))

    # -- ending work -----------------------------------------------------------

    def kill(self, work_id: str) -> bool:
        """SIGKILL the unit's process group now. False if it was not running (a no-op)."""
        return self._ask(rq.Kill(work_id, Reason.KILLED))

    def cancel(self, work_id: str, grace: float = 5.0) -> bool:
        """SIGTERM now, SIGKILL after ``grace`` seconds. False if it was not running."""
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
            raise SpecError(f"grace must be a number of seconds >= 0, got {grace!r}")
        return self._ask(rq.Cancel(work_id, float(grace)))

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
        return TeammateHandle(self, handle.id, cls)

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
        fn: Callable[..., Any] | str,
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

    def shed(self, n: int | None = None) -> builtins.list[str]:
        """Kill up to ``n`` running dreams (all with None), newest first; their IDs.

        They end ``killed`` with reason ``shed``, which tells them apart from an
        explicit kill: shed work is worth resubmitting when the load falls.
        """
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise SpecError(f"n must be an int >= 0 or None, got {n!r}")
        return self._ask(rq.Shed(n))

    # -- messages to teammates ------------------------------------------------------

    def tell(self, work_id: str, message: Any) -> None:
        """Queue ``message`` for a running teammate; TeammateEnded if it ended or is ending."""
        self._teammates.tell(work_id, message)

    def ask(self, work_id: str, message: Any, timeout: float | None = None) -> Any:
        """The teammate's answer to ``message``, or the exception its handler raised.

        TeammateEnded if it ends before answering (a kill mid-ask), AskTimeout
        after ``timeout`` seconds (None: until it answers or ends).
        """
        return self._teammates.ask(work_id, message, timeout)

    def ask_future(self, work_id: str, message: Any) -> Future[Any]:
        """Like ``ask``, returning at once; the future is resolved in the answer thread."""
        return self._teammates.ask_future(work_id, message)

    async def ask_async(self, work_id: str, message: Any, timeout: float | None = None) -> Any:
        """Like ``ask`` without blocking the event loop."""
        return await self._teammates.ask_async(work_id, message, timeout)

    def stop(self, work_id: str) -> bool:
        """Ask a teammate to stop after the messages already sent; False if not running."""
        return self._ask(rq.StopTeammate(work_id))

    # -- shutdown --------------------------------------------------------------

    def close(self, *, deploy: bool = False) -> None:
        """Kill running work (reason ``shutdown``), stop every actor and thread. Idempotent.

        ``deploy=True`` (what ``workunits serve`` does on SIGTERM): resumable
        units and pending ones are stopped without ending them in the ledger,
        so the next supervisor on this state dir resumes or starts them.
        """
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

    def _close_once(self, deploy: bool) -> None:
        _cleanup.untrack(self)
        try:
            end_all_work(self._channel, self._waiters, deploy=deploy, grace=self._shutdown_grace)
        except SupervisorClosed:
            pass
        finally:
            self._runtime.close(after_actor=self._teammates.close)
            self._state_dir_lock.release()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
