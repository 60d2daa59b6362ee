"""``Supervisor``: the blocking facade (and async twins) over the SupervisorActor.

Every call is an ``ask`` with a timeout: a pykka future of a stopping actor can
stay unresolved, and no call here may hang because of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import pykka

from workunits import _ids, _outputfile
from workunits._clock import Clock, SystemClock
from workunits._errors import (
    NotFinished,
    SpecError,
    SupervisorClosed,
    UnknownWork,
)
from workunits._ledger import Ledger, SupervisorLock, statedir
from workunits._ledger._db import sync_level
from workunits._ledger.store import DEFAULT_EXPIRE_AFTER
from workunits._mailbox import Mailbox
from workunits._record import WorkRecord
from workunits._remote.runtime import RayRuntime, check_available
from workunits._status import Reason, Status, is_terminal
from workunits._wire.results import result_of
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, AgentSpec, ShellSpec
from workunits._zygote.client import ZygoteClient
from workunits._zygote.reaper import Reaper
from workunits.actors.agent import AgentActor
from workunits.actors.base import WorkActor
from workunits.actors.dream import DreamActor
from workunits.actors.monitor import MonitorActor
from workunits.actors.remote import RemoteActor, RemoteSpec
from workunits.actors.remote_teammate import RemoteTeammateActor, teammates_local_or_remote
from workunits.actors.shell import ShellActor
from workunits.actors.workflow import WorkflowActor
from workunits.supervisor import cleanup as _cleanup
from workunits.supervisor.actor import SupervisorActor, Tick
from workunits.supervisor.facade_kinds import KindsFacade
from workunits.supervisor.handle import WorkHandle
from workunits.supervisor.kinds import Kinds
from workunits.supervisor.ticker import Ticker
from workunits.supervisor.tree import render_tree
from workunits.supervisor.waiters import TerminalWaiters

T = TypeVar("T")

DEFAULT_EVICTION_GRACE = 30.0
# A stream has two chunks alive at its peak: the one the caller still holds and
# the next one being read. 256 KiB keeps that well inside DESIGN section 8's
# 2 MiB budget and still catches up on a backlog at over 1 GiB/s.
STREAM_CHUNK = 256 << 10


class OutputStream(Iterator[bytes]):
    """The iterator ``Supervisor.stream()`` returns; it holds the unit retained until done."""

    def __init__(self, sup: Supervisor, work_id: str, poll: float) -> None:
        self._sup = sup
        self.id = work_id
        self._poll = poll
        self._delay = 0.001
        self._open = True

    def __next__(self) -> bytes:
        while self._open:
            data, record = self._sup._read_chunk(self.id)
            if data:
                self._delay = 0.001
                return data
            if is_terminal(record.status) and record.output_offset >= record.output_bytes:
                break
            # Nothing new yet: wait for the end or for more output, backing off.
            self._sup._wait_a_little(self.id, self._delay)
            self._delay = min(self._delay * 2, self._poll)
        self.close()
        raise StopIteration

    def close(self) -> None:
        if self._open:
            self._open = False
            self._sup._release_quietly(self.id)

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _raise_nofile_limit() -> None:
    # Each running unit holds a pidfd; allow as many as the hard limit permits.
    import resource  # noqa: PLC0415 - only needed once, at the first supervisor

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Supervisor(KindsFacade):
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
        ray_address: str | None = None,
        ray_temp_dir: str | os.PathLike[str] | None = None,
        ray_init: Mapping[str, Any] | None = None,
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
        """
        if not eviction_grace >= 0:
            raise SpecError(f"eviction_grace must be >= 0 seconds, got {eviction_grace!r}")
        for kind_name, limit in (concurrency or {}).items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise SpecError(f"concurrency[{kind_name!r}] must be an int >= 1, got {limit!r}")
        sync_level(ledger_sync, "ledger_sync")  # refused before the state dir is touched
        self.state_dir = statedir.prepare(state_dir)  # StateDirError when unsafe or read-only
        self._lock = SupervisorLock(self.state_dir)
        self._lock.acquire(timeout=lock_timeout)
        try:
            self._open(
                eviction_grace=eviction_grace,
                clock=clock,
                tick_interval=tick_interval,
                shutdown_grace=shutdown_grace,
                ask_timeout=ask_timeout,
                install_signal_handlers=install_signal_handlers,
                preload=preload,
                concurrency=concurrency,
                expire_after=expire_after,
                ledger_sync=ledger_sync,
                ray=RayRuntime(
                    address=ray_address,
                    temp_dir=Path(ray_temp_dir or self.state_dir / "ray").absolute(),
                    init_options=ray_init,
                ),
            )
        except BaseException:
            self._lock.release()
            raise

    def _open(
        self,
        *,
        eviction_grace: float,
        clock: Clock | None,
        tick_interval: float | None,
        shutdown_grace: float,
        ask_timeout: float,
        install_signal_handlers: bool,
        preload: Sequence[str],
        concurrency: Mapping[str, int] | None,
        expire_after: float,
        ledger_sync: str,
        ray: RayRuntime,
    ) -> None:
        self._output_dir = _outputfile.private_dir(self.state_dir / "output")
        self._clock = clock or SystemClock()
        self._ask_timeout = ask_timeout
        self._shutdown_grace = shutdown_grace
        self._init_kinds()
        self._closed = False
        # Guards _closed and _closing_thread: a check and two assignments, O(1).
        self._close_lock = threading.Lock()
        self._closing_thread: threading.Thread | None = None
        self._close_done = threading.Event()  # set when the first close() has finished
        _raise_nofile_limit()
        self._transcript_dir = _outputfile.private_dir(self.state_dir / _outputfile.TRANSCRIPTS_DIR)
        kinds = Kinds()
        kinds.add("b", ShellActor, builtin=True)
        kinds.add("a", AgentActor, builtin=True)
        # Ray is imported and reached only when a remote unit asks for it (remote/runtime.py).
        self._ray = ray
        kinds.add("r", RemoteActor.bound_to(self._ray), builtin=True)
        remote_teammates = RemoteTeammateActor.bound_to(self._ray)
        kinds.add("t", teammates_local_or_remote(remote_teammates), builtin=True)
        kinds.add("m", MonitorActor, builtin=True)
        kinds.add("d", DreamActor, builtin=True)
        kinds.add("w", WorkflowActor, builtin=True)
        # verify: a damaged ledger is refused before the session row is written into it.
        self._ledger = Ledger(
            self.state_dir,
            clock=self._clock,
            expire_after=expire_after,
            sync=ledger_sync,
            verify=True,
        )
        self.session = _ids.mint("s")
        self._reaper = Reaper()
        self._zygote = ZygoteClient(self._reaper, preload)
        # Warm the zygote up in the background: the first unit then finds it ready.
        # A daemon, joined at close: it must never hold the interpreter's exit.
        self._zygote_start = threading.Thread(
            target=self._zygote.start_quietly, name="workunits-zygote-start", daemon=True
        )
        self._zygote_start.start()
        self._ref = SupervisorActor.start(
            state_dir=self.state_dir,
            output_dir=self._output_dir,
            clock=self._clock,
            reaper=self._reaper,
            zygote=self._zygote,
            kinds=kinds,
            eviction_grace=eviction_grace,
            ledger=self._ledger,
            session=self.session,
            concurrency=concurrency,
        )
        self._actor = self._ref.proxy()
        self._waiters = TerminalWaiters()
        self._ask(self._actor.subscribe(self._waiters.on_change))
        # What a dead session left: resumed and lost units, adopted pending ones.
        self.recovered: dict[str, list[str]] = self._ask(self._actor.recover())
        self._ticker = None if tick_interval is None else Ticker(tick_interval, self._send_tick)
        _cleanup.track(self, signals=install_signal_handlers)

    # -- plumbing --------------------------------------------------------------

    def _ask(self, future: Any) -> Any:
        try:
            return cast("pykka.Future[Any]", future).get(timeout=self._ask_timeout)
        except pykka.ActorDeadError:
            raise SupervisorClosed("the supervisor is closed") from None
        except pykka.Timeout:
            raise SupervisorClosed(
                f"the supervisor actor did not answer within {self._ask_timeout} s"
            ) from None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise SupervisorClosed("the supervisor is closed")
        try:
            future = getattr(self._actor, method)(*args, **kwargs)
        except pykka.ActorDeadError:
            raise SupervisorClosed("the supervisor is closed") from None
        return self._ask(future)

    def _send_tick(self) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            self._ref.tell(Tick())

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
        fn: Callable[..., Any],
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
        record = self._call(
            "register",
            kind,
            spec,
            parent=parent,
            description=description,
            timeout=timeout,
            key=key,
            max_attempts=max_attempts,
        )
        return WorkHandle(self, cast(WorkRecord, record).id)

    def resident_ids(self) -> set[str]:
        """IDs whose records are in memory (the rest only the ledger still answers for)."""
        return cast("set[str]", self._call("resident_ids"))

    def gc(self, older_than: float | None = None) -> int:
        """Expire ended units past their retention; forget those expired ``older_than`` ago."""
        return cast(int, self._call("gc", older_than))

    def register_kind(self, letter: str, actor_class: type[WorkActor]) -> None:
        """Add a kind under an unused letter; built-in letters and ``s`` are refused."""
        self._call("register_kind", letter, actor_class)

    # -- reading ---------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        """The unit's current record: from memory, or from the ledger once evicted."""
        return cast(WorkRecord, self._call("get", work_id))

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
        return cast(
            "list[WorkRecord]", self._call("list_units", status=status, kind=kind, parent=parent)
        )

    def tree(self, root: str | None = None) -> str:
        """The units as an indented tree (all top-level units, or ``root`` and its descendants)."""
        return render_tree(self.list(), root)

    def read_output(self, work_id: str, max_bytes: int | None = None) -> bytes:
        """The output written since the last read; advances the unit's offset."""
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise SpecError(f"max_bytes must be a positive int, got {max_bytes!r}")
        data, _ = self._call("read_output", work_id, max_bytes)
        return cast(bytes, data)

    def stream(self, work_id: str, *, poll: float = 0.05) -> OutputStream:
        """Yield every byte of output exactly once, until the unit is terminal.

        The unit is retained from this call (not from the first ``next()``) until
        the stream ends or is closed, so its end cannot cut off unread output.
        """
        _ids.validate(work_id)
        self._call("retain", work_id)
        return OutputStream(self, work_id, poll)

    def _read_chunk(self, work_id: str) -> tuple[bytes, WorkRecord]:
        return cast("tuple[bytes, WorkRecord]", self._call("read_output", work_id, STREAM_CHUNK))

    def _wait_a_little(self, work_id: str, delay: float) -> None:
        """Wait up to ``delay`` for the unit to end (more output may come sooner)."""
        waiter = self._waiters.add(work_id)
        try:
            if not is_terminal(self.get(work_id).status):
                waiter.event.wait(delay)
        finally:
            self._waiters.discard(work_id, waiter)

    def _release_quietly(self, work_id: str) -> None:
        if not self._closed:
            with contextlib.suppress(SupervisorClosed, KeyError, pykka.ActorDeadError):
                self._actor.release(work_id)  # not awaited: may run from a finalizer

    def retain(self, work_id: str) -> WorkRecord:
        """Hold the record in memory (a viewer is looking at it) until ``release``."""
        return cast(WorkRecord, self._call("retain", work_id))

    def release(self, work_id: str) -> WorkRecord:
        """Undo one ``retain``; the eviction grace starts again from now."""
        return cast(WorkRecord, self._call("release", work_id))

    def notifications(self) -> Mailbox:
        """The application's mailbox: one notice per top-level unit that ends."""
        return cast(Mailbox, self._call("mailbox", None))

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
        return cast(bool, self._call("kill", work_id, Reason.KILLED))

    def cancel(self, work_id: str, grace: float = 5.0) -> bool:
        """SIGTERM now, SIGKILL after ``grace`` seconds. False if it was not running."""
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
            raise SpecError(f"grace must be a number of seconds >= 0, got {grace!r}")
        return cast(bool, self._call("cancel", work_id, float(grace)))

    # -- time ------------------------------------------------------------------

    def tick(self) -> int:
        """Run due deadlines and the eviction sweep now; returns how many records left memory."""
        return cast(int, self._call("tick"))

    # -- shutdown --------------------------------------------------------------

    def close(self, *, deploy: bool = False) -> None:
        """Kill running work (reason ``shutdown``), stop every actor and thread. Idempotent.

        ``deploy=True`` (what ``workunits serve`` does on SIGTERM): resumable
        units and pending ones are stopped without ending them in the ledger,
        so the next supervisor on this state dir resumes or starts them.
        """
        with self._close_lock:
            closed, self._closed = self._closed, True
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
            ending = cast("list[str]", self._ask(self._actor.begin_shutdown(deploy)))
            deadline = time.monotonic() + self._shutdown_grace
            stuck: list[str] = []
            for work_id in ending:
                waiter = self._waiters.add(work_id)
                try:
                    try:
                        record = self._ask(self._actor.get(work_id))
                    except UnknownWork:
                        continue  # it ended and was evicted already (a short eviction grace)
                    remaining = max(0.0, deadline - time.monotonic())
                    if not is_terminal(record.status) and not waiter.event.wait(remaining):
                        stuck.append(work_id)
                finally:
                    self._waiters.discard(work_id, waiter)
            if stuck:
                self._ask(self._actor.force_end(stuck, "did not exit within the shutdown grace"))
        except SupervisorClosed:
            pass
        finally:
            if self._ticker is not None:
                self._ticker.close()
            with contextlib.suppress(pykka.ActorDeadError):
                self._ref.stop(timeout=self._ask_timeout)
            self._close_kinds()
            self._ray.close()
            self._zygote_start.join(timeout=self._ask_timeout)
            self._zygote.close()
            self._reaper.close()
            self._lock.release()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
