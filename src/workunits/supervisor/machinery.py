"""``Machinery``: the processes, threads and files one ``Supervisor`` runs on.

The ledger, the Reaper, the zygote (warmed up on a daemon thread), Ray (when a
remote unit first asks for it), the supervisor actor and the Ticker: made in
that order by ``Machinery.open``, let go of in reverse by ``close``, which runs
once the facade has ended the work. Runs in the caller's thread.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pykka

from workunits._core import ids
from workunits._core.clock import Clock
from workunits._core.sandbox import Sandbox
from workunits._ledger import Ledger
from workunits._ledger.secretfile import SharedSecret
from workunits._ledger.sessions import DEFAULT_LEASE
from workunits._pool import WorkerPool
from workunits._ray.actor import RemoteActor
from workunits._ray.runtime import RayRuntime
from workunits._ray.teammate_actor import RemoteTeammateActor, teammates_local_or_remote
from workunits._sandbox.isolation import UNDUMPABLE, Isolation, hidden_environment, say
from workunits._util import outputfile
from workunits._zygote.client import ZygoteClient
from workunits._zygote.reaper import Reaper
from workunits.actors.agent import AgentActor
from workunits.actors.base import WorkActor
from workunits.actors.dream import DreamActor
from workunits.actors.monitor import MonitorActor
from workunits.actors.shell import ShellActor
from workunits.actors.warm_files import SPARE_DIR, WarmFiles
from workunits.actors.workflow import WorkflowActor
from workunits.supervisor.actor import ledger_mirror as durable
from workunits.supervisor.actor.kinds import Kinds
from workunits.supervisor.actor.supervisor_actor import SupervisorActor, Tick, Wake
from workunits.supervisor.actor.ticker import Ticker
from workunits.supervisor.channel import ActorChannel
from workunits.supervisor.gateway import Gateway

if TYPE_CHECKING:
    from workunits._ledger.postgres.listen import WakeListener


log = logging.getLogger(__name__)


def builtin_kinds(ray: RayRuntime, extra: Mapping[str, type[WorkActor]]) -> Kinds:
    """The built-in kinds, then ``extra`` (the Supervisor's ``kinds=``)."""
    kinds = Kinds()
    kinds.add("b", ShellActor, builtin=True)
    kinds.add("a", AgentActor, builtin=True)
    # Ray is imported and reached only when a remote unit asks for it (_ray/runtime.py).
    kinds.add("r", RemoteActor.bound_to(ray), builtin=True)
    remote_teammates = RemoteTeammateActor.bound_to(ray)
    kinds.add("t", teammates_local_or_remote(remote_teammates), builtin=True)
    kinds.add("m", MonitorActor, builtin=True)
    kinds.add("d", DreamActor, builtin=True)
    kinds.add("w", WorkflowActor, builtin=True)
    for letter, actor_class in extra.items():
        kinds.add(letter, actor_class)
    return kinds


@dataclass(frozen=True, slots=True)
class Options:
    """The Supervisor's constructor arguments the runtime uses, checked by the facade."""

    eviction_grace: float
    clock: Clock
    tick_interval: float | None
    ask_timeout: float
    preload: Sequence[str]
    extra_kinds: Mapping[str, type[WorkActor]]
    concurrency: Mapping[str, int] | None
    tracer_provider: Any
    max_resident_ended: int
    expire_after: float
    ledger_sync: str
    ray: RayRuntime
    ledger: str | None = None  # a postgresql:// URL; None: SQLite in the state dir
    pool_size: int = 2  # worker processes for pooled units (reuse=True)
    session_lease: float = DEFAULT_LEASE  # seconds without a heartbeat before a takeover
    on_session_lost: Callable[[], None] | None = None  # in the actor's thread; O(1)
    secret: SharedSecret | None = None  # the hosts' shared key and token (secret_file=)
    advertise: str | None = None  # the URL this supervisor's HTTP API is reached at
    isolation: str = "default"  # how units are confined: "default", "required" or "off"


def _listener(url: str, wake: Callable[[], None]) -> WakeListener:
    from workunits._ledger.postgres.listen import WakeListener  # noqa: PLC0415 - optional

    return WakeListener(url, wake)


def _gateway(tell: Callable[[object], None]) -> Gateway | None:
    """The gateway of ``workunits`` commands inside units; None (said) when none can be made:
    those commands then say they cannot reach the supervisor."""
    try:
        return Gateway(tell)
    except OSError as exc:
        log.warning("supervisor: no gateway for commands inside units: %s", exc)
        return None


class Machinery:
    def __init__(self, state_dir: Path, options: Options) -> None:
        self.isolation = isolation = Isolation(
            options.isolation,
            state_dir=str(state_dir),
            secret_files=() if options.secret is None else (str(options.secret.path),),
        )
        isolation.check_start()  # what the probe knows already: before anything is opened
        self._noticed = False
        self.ray = options.ray
        output_dir = outputfile.private_dir(state_dir / "output")
        outputfile.private_dir(state_dir / outputfile.TRANSCRIPTS_DIR)
        # verify: a damaged ledger is refused before the session row is written into it.
        self.ledger = Ledger(
            state_dir,
            clock=options.clock,
            expire_after=options.expire_after,
            sync=options.ledger_sync,
            verify=True,
            ledger=options.ledger,
            secret=options.secret,
            # Frozen inside a write, this supervisor holds every writer of the
            # cluster (their heartbeats too): the server ends that within a
            # quarter of the lease, so no live session's lease lapses meanwhile.
            idle_limit=options.session_lease / 4,
        )
        self.session = ids.mint("s")
        self.reaper = Reaper()
        self.zygote = ZygoteClient(
            self.reaper,
            options.preload,
            isolation=isolation.settings(),
            hidden_env=hidden_environment(options.ledger is not None),
            on_ready=self._zygote_ready,
        )
        if isolation.mode == "required":
            try:
                self.zygote.start()  # its word on the namespace decides whether we start
                isolation.check_start()
            except BaseException:
                self.zygote.close()
                self.reaper.close()
                self.ledger.close()
                raise
        # Warm the zygote up in the background (the client's own daemon thread,
        # joined by its close): the first unit then finds it ready.
        self.zygote.start_quietly()
        # Workers start with the first pooled unit: a supervisor that never asks pays nothing.
        self.pool = WorkerPool(
            self.zygote,
            self.reaper,
            options.pool_size,
            confine=lambda worker, policy: isolation.confinement(worker, 1, policy),
            policy=Sandbox(),
        )
        self._ask_timeout = options.ask_timeout
        # Units' output files, made ahead of their launches (actors/warm_files.py).
        self.files = WarmFiles(state_dir / SPARE_DIR)
        self._ref = SupervisorActor.start(
            state_dir=state_dir,
            output_dir=output_dir,
            clock=options.clock,
            reaper=self.reaper,
            zygote=self.zygote,
            kinds=builtin_kinds(self.ray, options.extra_kinds),
            eviction_grace=options.eviction_grace,
            ledger=self.ledger,
            session=self.session,
            concurrency=options.concurrency,
            tracer_provider=options.tracer_provider,
            max_resident_ended=options.max_resident_ended,
            pool=self.pool,
            files=self.files,
            session_lease=options.session_lease,
            # Other supervisors may share a PostgreSQL ledger (each with its own
            # state dir and lock); SQLite's is this state dir's alone.
            shared_ledger=options.ledger is not None,
            on_session_lost=options.on_session_lost,
            isolation=isolation,
        )
        self.channel = ActorChannel(self._ref, options.ask_timeout)
        # ``workunits`` commands inside confined units reach us here (the state dir is hidden).
        self.gateway = _gateway(self.channel.tell) if isolation.on else None
        if self.gateway is not None:
            isolation.unit_env = self.gateway.environment
        self._last_tick: pykka.Future[Any] | None = None  # the Ticker's thread only
        interval = options.tick_interval  # None: ticks only when asked (Supervisor.tick)
        self._ticker = None if interval is None else Ticker(interval, self._tick)
        # On PostgreSQL, other processes' requests wake the actor at once.
        self.listener = None if options.ledger is None else _listener(options.ledger, self._wake)
        if isolation.on:
            UNDUMPABLE.hold()  # released by close()

    def _zygote_ready(self, missing: tuple[str, ...]) -> None:
        """A zygote's handshake (the thread that started it): what it could not make.
        Said once on stderr, at the first zygote (DESIGN invariant 15)."""
        self.isolation.zygote_reported(missing)
        notice = self.isolation.notice()
        if notice is not None and not self._noticed:
            self._noticed = True
            say(notice)

    def _wake(self) -> None:
        """In the listener's thread: a tell, never a wait."""
        self.channel.tell(Wake())

    def _tick(self) -> None:
        """In the Ticker's thread: a send, never a wait; none while the last is unhandled.

        The tick is asked, not told, only to learn without waiting whether the
        actor has handled it: a busy actor gets no pile of ticks behind its backlog.
        """
        if self._last_tick is not None:
            try:
                self._last_tick.get(timeout=0)
            except pykka.Timeout:
                return  # the last tick still waits for the actor
            except pykka.ActorDeadError:
                return  # stopping: close() stops the Ticker next
        self._last_tick = self._ref.ask(Tick(), block=False)

    def close(self, after_actor: Callable[[], None]) -> None:
        """Stop the ticks and the actor, then the processes under it. Once, from close().

        ``after_actor`` runs once the actor has stopped (every route has been called).
        """
        if self._ticker is not None:
            self._ticker.close()
        if self.listener is not None:
            self.listener.close()
        with contextlib.suppress(pykka.ActorDeadError):
            # The actor's on_stop may spend CLOSE_RETRY_FOR landing writes that failed.
            self._ref.stop(timeout=max(self._ask_timeout, durable.CLOSE_RETRY_FOR + 5.0))
        after_actor()
        if self.gateway is not None:
            self.gateway.close()
        self.ray.close()
        self.pool.close()
        self.zygote.close()
        self.reaper.close()
        self.files.close()  # units launch no more
        if self.isolation.on:
            UNDUMPABLE.release()
