"""The supervisor's side of the zygote: start it, send spawn and signal requests, route exits.

Requests come from WorkActor threads; replies and exits arrive on the Reaper
thread and are routed to each unit's ``UnitEvents``. If the zygote dies, every
unit it forked is reported ``lost`` (its processes die with it through their
parent-death signal) and the next spawn starts a new zygote. A zygote starts
outside the lock the Reaper needs: a slow start delays only the spawns that
wait for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from workunits._sandbox.unit import Settings
from workunits._util import framing
from workunits._wire.zygote_protocol import (
    Exited,
    Ready,
    Signal,
    SpawnCall,
    Spawned,
    SpawnExec,
    SpawnFailed,
    call_request,
    from_zygote,
)
from workunits._zygote import nofile, payload
from workunits._zygote.reaper import Reaper
from workunits._zygote.warm import WarmSettings

log = logging.getLogger(__name__)


class ZygoteUnavailable(RuntimeError):
    pass


class UnitEvents(Protocol):
    """How a unit hears about its process; called on the Reaper thread, must not block."""

    def spawned(self, pid: int, pidfd: int) -> None:
        """The unit process exists; the callee owns ``pidfd`` and must close it."""

    def spawn_failed(self, error: str) -> None: ...
    def exited(
        self, exit_code: int | None, signum: int | None, limit: str | None = None
    ) -> None: ...
    def lost(self) -> None: ...

    def kill(self) -> None:
        """SIGKILL the process now through its pidfd (any thread); a no-op without one."""


class _Zygote:
    """One zygote process and the units it forked."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen[bytes], pid: int) -> None:
        self.sock = sock
        self.proc = proc  # the zygote's guard, which forked the zygote (see _zygote.guard)
        self.pid = pid
        self.reader = framing.FrameReader()
        self.fds: list[int] = []  # pidfds received, taken by Spawned frames in order
        # Invariant: a unit is here from its spawn request until its exit (or loss) is routed.
        self.units: dict[str, UnitEvents] = {}
        self.alive = True


class _Start:
    """One zygote start in progress: the process (once Popen returned) and its outcome."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.done: Future[_Zygote] = Future()


class ZygoteClient:
    def __init__(
        self,
        reaper: Reaper,
        preload: Sequence[str] = (),
        start_timeout: float = 30.0,
        warm: WarmSettings | None = None,
        *,
        isolation: Settings | None = None,
        hidden_env: Sequence[str] = (),
        on_ready: Callable[[tuple[str, ...]], None] | None = None,
    ):
        """``warm``: the zygotes' warm processes; None reads them from the environment.

        ``isolation``: what the zygote confines units with (None: nothing);
        ``hidden_env``: variables no unit may see (the runtime's secrets), left
        out of the zygote's environment; ``on_ready`` hears, once per zygote,
        what of the default protection it could not make (any thread).

        Raises ``InvalidArgument`` for a bad ``WORKUNITS_WARM_*`` variable (see ``warm``).
        """
        self._reaper = reaper
        self._preload = tuple(preload)
        self._start_timeout = start_timeout
        self._warm = WarmSettings.from_environment() if warm is None else warm
        self._isolation = isolation or Settings("off")
        self._hidden_env = tuple(hidden_env)
        self._on_ready = on_ready
        # Guards _current, _all, _starting, _closed and every zygote's ``units`` and
        # ``alive``. Held for O(1) work only: never across a process start, the
        # handshake or a send, since the Reaper takes it for every event it routes.
        self._lock = threading.Lock()
        # Serialises sends on the control sockets, so frames never interleave. Held
        # across a (possibly blocking) send but never with ``_lock``: a sender blocked
        # on a full socket must leave the Reaper free to drain the zygote's replies.
        self._send_lock = threading.Lock()
        self._current: _Zygote | None = None
        self._starting: _Start | None = None  # published under _lock; run outside it
        self._all: list[_Zygote] = []
        self._closed = False
        self._warmer: threading.Thread | None = None  # start_quietly's; joined by close()

    @property
    def pid(self) -> int | None:
        current = self._current
        return None if current is None else current.pid

    @property
    def ready(self) -> bool:
        """A zygote is up: a spawn request is sent at once, never waits for a start."""
        current = self._current
        return current is not None and current.alive

    def start(self) -> None:
        """Start the zygote now rather than at the first spawn; blocks until it is ready."""
        self._ensure()

    def start_quietly(self) -> None:
        """Begin starting the zygote in the background; return at once.

        A failure is left to be reported by the first spawn. The thread is a
        daemon and ``close`` joins it.
        """
        with self._lock:
            if self._closed or self._warmer is not None:
                return
            self._warmer = threading.Thread(
                target=self._start_ignoring_errors, name="workunits-zygote-start", daemon=True
            )
            self._warmer.start()

    def _start_ignoring_errors(self) -> None:
        with contextlib.suppress(ZygoteUnavailable, OSError):
            self._ensure()

    def _ensure(self) -> _Zygote:
        """The current zygote, started if need be. Called without the lock.

        The first caller to find none publishes a ``_Start`` under the lock and
        starts the process outside it; later callers wait for that start's
        outcome, also outside the lock. When it failed for want of a resource
        (an OSError), each of them tries once more itself rather than fail with it.
        """
        while True:
            with self._lock:
                if self._closed:
                    raise ZygoteUnavailable("the supervisor is closed")
                if self._current is not None:
                    return self._current
                start = self._starting
                ours = start is None
                if start is None:
                    start = self._starting = _Start()
            if ours:
                break
            try:
                return start.done.result()
            except OSError:
                # Another caller's start ran out of descriptors, processes or memory,
                # which may be back by now: a fault in starting one unit fails that
                # unit only (DESIGN §2.14), so this caller tries a start of its own.
                continue
        try:
            zygote = self._start(start)
        except BaseException as exc:
            with self._lock:
                self._starting = None
            start.done.set_exception(exc)
            raise
        start.done.set_result(zygote)
        return zygote

    def _start(self, start: _Start) -> _Zygote:
        """Start a zygote and wait for its handshake (in the caller's thread, no lock held)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workunits._zygote", str(theirs.fileno()), *self._preload],
                pass_fds=(theirs.fileno(),),
                env={
                    **_environment_for_units(self._hidden_env),
                    **self._warm.environment(),
                    **nofile.environment(),
                    **self._isolation.environment(),
                },
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is the supervisor's to handle
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        with self._lock:
            start.proc = proc  # close() kills it now rather than wait for the handshake
            closed = self._closed
        frames: list[Any] = []
        if closed:
            frames = [ZygoteUnavailable("the supervisor is closed")]
        else:
            ours.settimeout(self._start_timeout)
            reader = framing.FrameReader()
            try:
                while not frames:
                    frames = framing.recv_blocking(ours, reader)
            except (OSError, EOFError) as exc:
                frames = [exc]
        if not isinstance(frames[0], Ready):
            _abandon(ours, proc)
            with self._lock:
                closed = self._closed
            if closed:
                raise ZygoteUnavailable("the supervisor is closed")
            raise ZygoteUnavailable(f"the zygote did not start: {frames[0]!r}")
        ours.settimeout(None)
        if self._on_ready is not None:
            self._on_ready(frames[0].missing)
        zygote = _Zygote(ours, proc, frames[0].pid)
        try:
            self._reaper.watch_stream(
                ours,
                lambda data, fds: self._on_data(zygote, data, fds),
                lambda: self._on_close(zygote),
            )
        except BaseException:
            _abandon(ours, proc)
            raise
        with self._lock:
            self._starting = None
            closed = self._closed
            if not closed:
                self._current = zygote
                self._all.append(zygote)
        if closed:
            # close() ran during the start and did not see this zygote: end it here.
            _abandon(ours, proc)
            raise ZygoteUnavailable("the supervisor is closed")
        return zygote

    def _register(self, unit_id: str, events: UnitEvents) -> _Zygote:
        """Enter the unit into the current zygote's table, starting a zygote if need be."""
        for _ in range(3):
            zygote = self._ensure()
            with self._lock:
                # A zygote that died since _ensure returned it has reported its units
                # lost already; one registered now would never hear of its end.
                if zygote.alive:
                    zygote.units[unit_id] = events
                    return zygote
        raise ZygoteUnavailable("the zygote keeps dying as it starts")

    def _send(
        self, unit_id: str, events: UnitEvents, message: Any, fds: list[int], *, plain: bool = False
    ) -> None:
        for attempt in (1, 2):
            zygote = self._register(unit_id, events)
            try:
                with self._send_lock:
                    framing.send(zygote.sock, message, fds, plain=plain)
            except OSError:
                # The zygote died under us; its EOF reports its other units lost.
                with self._lock:
                    zygote.units.pop(unit_id, None)
                    self._retire(zygote)
                if attempt == 2:
                    raise
            else:
                return

    def spawn_exec(
        self,
        message: SpawnExec,
        output_fd: int,
        events: UnitEvents,
        input_fd: int | None = None,
    ) -> None:
        """``input_fd``: with ``message.stdin``, the read end of the unit's stdin pipe."""
        fds = [output_fd] if input_fd is None else [output_fd, input_fd]
        # Plain pickle: a command is strings and numbers, and cloudpickle's pure-Python
        # pickler took three times as long to write it, on the supervisor's thread.
        self._send(message.unit_id, events, message, fds, plain=True)

    def spawn_call(
        self, message: SpawnCall, transcript_fd: int, channel_fd: int, events: UnitEvents
    ) -> None:
        if len(message.payload) <= payload.FD_PAYLOAD:
            request = call_request(message)
            self._send(message.unit_id, events, request, [transcript_fd, channel_fd], plain=True)
            return
        payload_fd = payload.to_memfd(message.payload, message.unit_id)
        try:
            light = call_request(dataclasses.replace(message, payload=b"", payload_in_fd=True))
            fds = [transcript_fd, channel_fd, payload_fd]
            self._send(message.unit_id, events, light, fds, plain=True)
        finally:
            os.close(payload_fd)  # the zygote holds its own copy of the descriptor now

    def signal(self, unit_id: str, signum: int) -> None:
        """Have the zygote signal the unit's group (any thread; never blocks the Reaper's).

        A SIGKILL first goes to the process itself through its pidfd (its
        events' ``kill``), so it lands even while the zygote is held up (stopped,
        or busy forking); the zygote then kills the rest of the group, as it
        would anyway. From the Reaper thread (a kind's ``end_on_exit`` runs
        there) the request is sent from a thread of its own: the zygote may be
        blocked sending to us, and only the Reaper reads its socket.
        """
        with self._lock:
            targets = [(z, z.units[unit_id]) for z in self._all if z.alive and unit_id in z.units]
        for zygote, events in targets:
            if signum == signal.SIGKILL:
                events.kill()
            if self._reaper.on_its_thread():
                threading.Thread(
                    target=self._send_signal,
                    args=(zygote, unit_id, signum),
                    name="workunits-zygote-signal",
                    daemon=True,
                ).start()
            else:
                self._send_signal(zygote, unit_id, signum)

    def _send_signal(self, zygote: _Zygote, unit_id: str, signum: int) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            framing.send(zygote.sock, Signal(unit_id, signum))

    def _retire(self, zygote: _Zygote) -> None:
        """Stop using a zygote (lock held); the next spawn starts a new one."""
        if self._current is zygote:
            self._current = None

    # -- the Reaper thread ------------------------------------------------------

    def _on_data(self, zygote: _Zygote, data: bytes, fds: list[int]) -> None:
        zygote.fds.extend(fds)
        for frame in zygote.reader.feed(data):
            message = from_zygote(frame)
            if isinstance(message, Spawned):
                if not zygote.fds:
                    self._pidfd_dropped(zygote, message.unit_id)
                    continue
                pidfd = zygote.fds.pop(0)
                with self._lock:
                    events = zygote.units.get(message.unit_id)
                if events is None:
                    os.close(pidfd)
                else:
                    events.spawned(message.pid, pidfd)
            elif isinstance(message, SpawnFailed | Exited):
                with self._lock:
                    events = zygote.units.pop(message.unit_id, None)
                if events is None:
                    continue
                if isinstance(message, SpawnFailed):
                    events.spawn_failed(message.error)
                else:
                    events.exited(message.exit_code, message.signal, message.limit)

    def _pidfd_dropped(self, zygote: _Zygote, unit_id: str) -> None:
        """Handle a Spawned that came without its pidfd.

        The kernel drops passed descriptors (MSG_CTRUNC) when this process is out
        of them. Without a pidfd the unit cannot be signalled safely, so it is
        killed now and reported as not started; the frames after it still count.
        """
        with self._lock:
            events = zygote.units.pop(unit_id, None)
        # Not sent from this (the Reaper) thread, and never under _lock: the zygote
        # may itself be blocked sending to us, and only this thread reads its socket.
        threading.Thread(
            target=self._send_signal,
            args=(zygote, unit_id, signal.SIGKILL),
            name="workunits-zygote-kill",
            daemon=True,
        ).start()
        if events is not None:
            events.spawn_failed(
                "no descriptor for the unit's pidfd (EMFILE: this process is out of "
                "file descriptors, RLIMIT_NOFILE); it was killed before it could run"
            )

    def _on_close(self, zygote: _Zygote) -> None:
        """The zygote's socket reached EOF: it is gone, and so are its units."""
        with self._lock:
            zygote.alive = False
            self._retire(zygote)
            lost = list(zygote.units.values())
            zygote.units.clear()
        for events in lost:
            events.lost()

    def close(self, timeout: float = 10.0) -> None:
        """Close the control sockets: each zygote kills what is left and exits.

        A start in progress is cut short (its process killed), and the
        background starter of ``start_quietly`` is joined.
        """
        with self._lock:
            self._closed = True
            self._current = None
            zygotes, self._all = self._all, []
            start, warmer = self._starting, self._warmer
        if start is not None and start.proc is not None:
            with contextlib.suppress(OSError):
                start.proc.kill()
        if warmer is not None:
            warmer.join(timeout)
        for zygote in zygotes:
            # shutdown, not just close: the Reaper holds a duplicate of the socket.
            with contextlib.suppress(OSError):
                zygote.sock.shutdown(socket.SHUT_RDWR)
            zygote.sock.close()
        for zygote in zygotes:
            try:
                zygote.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("zygote %d did not exit; killing it", zygote.proc.pid)
                zygote.proc.kill()
                zygote.proc.wait()


def _abandon(sock: socket.socket, proc: subprocess.Popen[bytes]) -> None:
    """End a zygote that never became current: nobody else knows of it."""
    sock.close()
    proc.kill()
    proc.wait()


def _environment_for_units(hidden: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment, with its import path: a unit can import what we can,
    without the variables in ``hidden`` (the runtime's secrets).

    Without the path, a callable stored by reference from a module beside the
    main script (not on the default path) could not be loaded in the unit process.
    """
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env
