"""The supervisor's pool of worker processes for pooled units (``reuse=True``).

Workers are forked by the zygote like units (own session, parent-death signal,
containment), and each runs ``_unit.worker.serve``: one unit at a time,
handed over its control socket with the unit's transcript and channel. A unit
hears of its worker as it would of its own process, through the zygote's
``UnitEvents``: ``spawned`` (a duplicate of the worker's pidfd), then ``exited``
when the worker reports the unit done (exit code from the unit) or when the
worker dies under it (its exit status: a crash or a kill fails or kills that
unit only). A signal for a unit goes to its worker's process group, so a kill
ends the worker; the next unit gets a new one. Units beyond ``size`` wait here
for a free worker, in the order they were started.

That order is kept although each unit hands itself over from its own actor's
thread (``run``), where thread timing would reorder units started together:
the supervisor's thread ``reserve``s each unit's place as its actor is
created, in start order, and a free worker takes the first place only once
its unit has arrived. A place whose unit never arrives (its launch failed, or
its actor never started) is ``withdraw``n, so it cannot hold the queue.

Workers share the sandbox policy of the units they run: a pool serves one
policy, and ``for_policy`` gives (making it at first use) the pool of each
other one, ``size`` workers at most each. A worker is confined once, as it
starts, with its policy's confinement; every unit it runs shares its process,
its limits included, with the units before and after it.

Threads: ``run`` and ``signal`` come from unit actors, the worker events and
the workers' frames from the Reaper thread. Neither starts a process on the
Reaper thread (a zygote start blocks): a worker that must be started for a
waiting unit is started on a short-lived thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from workunits._core import ids as _ids
from workunits._core.sandbox import Sandbox
from workunits._sandbox.plan import Confinement
from workunits._util import framing
from workunits._wire.pool_protocol import WORKER_KIND, RunUnit, UnitDone
from workunits._wire.untrusted import unit_frames
from workunits._wire.zygote_protocol import SpawnCall
from workunits._zygote._linux import kill_through_pidfd
from workunits._zygote.client import UnitEvents, ZygoteClient, ZygoteUnavailable
from workunits._zygote.reaper import Reaper

WORKER_PREFIX = "p"  # worker ids live in the zygote's table beside unit ids

_Tell = Callable[[UnitEvents], None]  # how a worker's end reaches the unit it ran


@dataclass(slots=True)
class _Job:
    """One unit handed to the pool; owns its two descriptors until sent."""

    call: SpawnCall
    transcript_fd: int
    channel_fd: int
    events: UnitEvents
    told_spawned: bool = False

    def release_fds(self) -> None:
        for fd in (self.transcript_fd, self.channel_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.transcript_fd = self.channel_fd = -1


@dataclass(slots=True)
class _Worker:
    id: str
    sock: socket.socket
    # A worker runs units' code: its frames build plain data only (``untrusted``).
    reader: framing.FrameReader = field(default_factory=unit_frames)
    pid: int | None = None
    pidfd: int | None = None
    job: _Job | None = None  # the unit it runs now
    alive: bool = True
    stream_key: int | None = None
    tmpdir: str | None = None  # its private temp dir, removed when it is gone


# How a worker is confined: (worker id, policy) -> its confinement (None: unconfined).
Confine = Callable[[str, Sandbox | None], Confinement | None]


class WorkerPool:
    def __init__(
        self,
        zygote: ZygoteClient,
        reaper: Reaper,
        size: int,
        *,
        confine: Confine | None = None,
        policy: Sandbox | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, got size={size}")
        self.size = size
        self._zygote = zygote
        self._reaper = reaper
        self._confine = confine
        self.policy = policy  # the sandbox policy of every unit this pool's workers run
        self._others: dict[Sandbox, WorkerPool] = {}  # the pools of other policies
        # Guards _workers, the queue, _closed and each worker's job, pid, pidfd and
        # alive. O(1) work only: never held across a send, a spawn or an event call.
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._starting = 0  # workers being spawned (they count toward size)
        # The queue: units waiting for a worker, in start order, reserved or arrived.
        self._order: deque[str] = deque()
        self._queued: set[str] = set()  # the units of _order, to look one up in O(1)
        self._arrived: dict[str, _Job] = {}  # the units of _order that ``run`` handed over
        self._closed = False

    def pids(self) -> list[int]:
        """The pids of the live workers, other policies' too (for tests and diagnostics)."""
        with self._lock:
            pids = [w.pid for w in self._workers.values() if w.alive and w.pid is not None]
            others = list(self._others.values())
        return pids + [pid for pool in others for pid in pool.pids()]

    def for_policy(self, policy: Sandbox | None) -> WorkerPool:
        """The pool whose workers run units of sandbox ``policy`` (this one, or another
        made now); any thread."""
        if policy is None or policy == self.policy or self._confine is None:
            return self
        with self._lock:
            pool = self._others.get(policy)
            if pool is None:
                pool = WorkerPool(
                    self._zygote, self._reaper, self.size, confine=self._confine, policy=policy
                )
                pool._closed = self._closed
                self._others[policy] = pool
        return pool

    # -- from unit actors ---------------------------------------------------------

    def reserve(self, unit_id: str) -> None:
        """Keep a place in the queue for ``unit_id``, whose ``run`` is to follow.

        Called in start order (the supervisor's thread), so units run in that
        order whichever of their threads reaches ``run`` first.
        """
        with self._lock:
            if not self._closed:
                self._enqueue(unit_id)

    def withdraw(self, unit_id: str) -> None:
        """Give up the place of a unit that will not ``run`` after all (its launch failed)."""
        with self._lock:
            if unit_id in self._arrived or unit_id not in self._queued:
                return  # it arrived (it runs, or its signal or the pool's close ends it)
            self._drop(unit_id)
        self._serve_waiting(start_here=False)  # maybe from the supervisor's thread

    def run(self, call: SpawnCall, transcript_fd: int, channel_fd: int, events: UnitEvents) -> None:
        """Run ``call`` on a free worker (or once one is free). The two fds are the pool's
        from this call on, even when it raises: closed once sent, or when the unit cannot
        run (a duplicate of each, two more system calls per unit, would do no more)."""
        job = _Job(call, transcript_fd, channel_fd, events)
        with self._lock:
            if self._closed:
                job.release_fds()
                raise ZygoteUnavailable("the supervisor is closed")
            self._enqueue(call.unit_id)  # not reserved: it queues from now
            self._arrived[call.unit_id] = job
        self._serve_waiting(start_here=True)

    def _serve_waiting(self, *, start_here: bool) -> None:
        """Hand the first waiting units to idle workers; start a worker if there is room.

        ``start_here``: the caller's thread may block for a worker's start (not
        the Reaper's, not the supervisor's); else the start gets a thread of its own.
        """
        while True:
            start = False
            with self._lock:
                job = self._first_arrived()
                if job is None:
                    return
                # A worker idle now (one just started, before its starter handed it
                # the first waiting unit) takes the first unit in order.
                worker = self._idle_worker()
                if worker is not None:
                    self._take_first()
                    worker.job = job
                else:
                    start = len(self._workers) + self._starting < self.size
                    if start:
                        self._starting += 1
            if worker is None:
                if start and start_here:
                    self._start_worker()
                elif start:
                    self._start_worker_in_background()
                return
            self._hand_over(worker, job)

    # -- the queue (lock held) ----------------------------------------------------------

    def _enqueue(self, unit_id: str) -> None:
        if unit_id not in self._queued:
            self._queued.add(unit_id)
            self._order.append(unit_id)

    def _drop(self, unit_id: str) -> None:
        """Take ``unit_id`` out of the queue wherever it is (O(n): kills and failed launches)."""
        self._queued.discard(unit_id)
        self._order.remove(unit_id)
        self._arrived.pop(unit_id, None)

    def _first_arrived(self) -> _Job | None:
        """The first waiting unit when it has arrived; None while its place is only
        reserved, or when nothing waits."""
        return self._arrived.get(self._order[0]) if self._order else None

    def _take_first(self) -> _Job:
        """Take the first waiting unit, which has arrived, out of the queue."""
        unit_id = self._order.popleft()
        self._queued.discard(unit_id)
        return self._arrived.pop(unit_id)

    def signal(self, unit_id: str, signum: int) -> None:
        """Signal the worker running ``unit_id``; a waiting unit is taken out and ended."""
        target: _Worker | None = None
        waiting: _Job | None = None
        with self._lock:
            for worker in self._workers.values():
                if worker.alive and worker.job is not None and worker.job.call.unit_id == unit_id:
                    target = worker
                    break
            else:
                waiting = self._arrived.get(unit_id)
                if waiting is not None and signum in (signal.SIGKILL, signal.SIGTERM):
                    self._drop(unit_id)
                else:
                    waiting = None
        if target is not None:
            self._zygote.signal(target.id, signum)
        elif waiting is not None:  # it never ran: it ends as a process killed before it started
            waiting.release_fds()
            waiting.events.exited(None, signum)

    def end_waiting(self, unit_id: str, signum: int) -> bool:
        """End ``unit_id`` as killed by ``signum`` if it still waits for a worker (its body
        never runs: a cancel of a queued unit, DESIGN §2.2); False when it runs already
        (or never came), and nothing is done."""
        with self._lock:
            waiting = self._arrived.get(unit_id)
            if waiting is None:
                return False
            self._drop(unit_id)
        waiting.release_fds()
        waiting.events.exited(None, signum)
        return True

    def close(self) -> None:
        """End the workers (they exit at EOF) and the units still waiting, every policy's."""
        with self._lock:
            others = list(self._others.values())
        for pool in others:
            pool.close()
        with self._lock:
            self._closed = True
            workers = list(self._workers.values())
            waiting = [self._arrived[u] for u in self._order if u in self._arrived]
            self._order.clear()
            self._queued.clear()
            self._arrived.clear()
        for job in waiting:
            job.release_fds()
            job.events.spawn_failed("the supervisor closed before a pooled worker was free")
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.sock.shutdown(socket.SHUT_RDWR)

    # -- workers ----------------------------------------------------------------------

    def _idle_worker(self) -> _Worker | None:
        """A live worker with no unit (lock held)."""
        for worker in self._workers.values():
            if worker.alive and worker.job is None:
                return worker
        return None

    def _start_worker(self) -> None:
        """Spawn one worker (``_starting`` was counted under the lock) and give it work."""
        worker_id = _ids.mint(WORKER_PREFIX)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        worker = _Worker(worker_id, ours)
        quiet = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            worker.stream_key = self._reaper.watch_stream(
                ours,
                lambda data, fds: self._on_frames(worker, data, fds),
                lambda: None,  # its end is the zygote's Exited, which _WorkerEvents routes
            )
            with self._lock:
                self._workers[worker_id] = worker
            confinement = None if self._confine is None else self._confine(worker_id, self.policy)
            worker.tmpdir = None if confinement is None else confinement.tmpdir
            call = SpawnCall(
                unit_id=worker_id, kind=WORKER_KIND, payload=b"", confinement=confinement
            )
            self._zygote.spawn_call(call, quiet, theirs.fileno(), _WorkerEvents(self, worker))
        except (OSError, ZygoteUnavailable) as exc:
            error = f"could not start a pooled worker: {exc}"
            self._worker_gone(worker, lambda events: events.spawn_failed(error), start_failed=True)
            return
        finally:
            os.close(quiet)
            theirs.close()
            with self._lock:
                self._starting -= 1
        self._serve_waiting(start_here=True)  # a starter's thread

    def _hand_over(self, worker: _Worker, job: _Job) -> None:
        """Send ``job`` to ``worker`` (assigned under the lock already)."""
        # Its pid first: once sent, the unit may end (on the Reaper thread) before this
        # thread goes on, and a unit's end must come after its pid (supervisor's pids).
        self._tell_spawned(worker, job)
        # A worker that is dying refuses the send; its exit ends this unit, as a crash would.
        # Plain pickle: the call's code is inside its payload, already pickled bytes.
        with contextlib.suppress(OSError):
            fds = [job.transcript_fd, job.channel_fd]
            framing.send(worker.sock, RunUnit(job.call), fds, plain=True)
        job.release_fds()  # the worker holds its own copies now

    def _kill_now(self, worker: _Worker) -> None:
        """SIGKILL the worker through its pidfd (any thread): a kill of its unit lands at
        once; the zygote's reap ends the unit and starts another worker, as before."""
        with self._lock:  # the pidfd stays open meanwhile
            if worker.pidfd is not None:
                kill_through_pidfd(worker.pidfd)

    def _tell_spawned(self, worker: _Worker, job: _Job) -> None:
        with self._lock:
            told = self._spawned_news(worker, job)
        if told is not None:
            job.events.spawned(*told)

    def _spawned_news(self, worker: _Worker, job: _Job) -> tuple[int, int] | None:
        """Under the lock: the pid and a pidfd to tell ``job`` of, once (None: not now)."""
        pid, pidfd = worker.pid, worker.pidfd
        if pid is None or pidfd is None or job.told_spawned or worker.job is not job:
            return None
        job.told_spawned = True
        return pid, os.dup(pidfd)

    # -- the Reaper thread -------------------------------------------------------------

    def _on_frames(self, worker: _Worker, data: bytes, fds: list[int]) -> None:
        for fd in fds:  # a worker has no business sending descriptors
            os.close(fd)
        for frame in worker.reader.feed(data):
            if not isinstance(frame, UnitDone):
                continue
            with self._lock:
                job = worker.job
                if job is None or job.call.unit_id != frame.unit_id:
                    continue
                # A worker whose own start was told late: its pid still before its end.
                told = self._spawned_news(worker, job)
                worker.job = None
            if told is not None:
                job.events.spawned(*told)
            job.events.exited(frame.code, None)
            self._serve_waiting(start_here=False)  # the Reaper thread

    def _spawned(self, worker: _Worker, pid: int, pidfd: int) -> None:
        with self._lock:
            worker.pid, worker.pidfd = pid, pidfd
            job = worker.job
        if job is not None:
            self._tell_spawned(worker, job)

    def _worker_gone(self, worker: _Worker, tell: _Tell, *, start_failed: bool = False) -> None:
        """The worker exited, failed to start, or was lost: its unit (only) hears of it.

        A worker that could not start fails one waiting unit when it had none of
        its own, so retrying for the others always ends.
        """
        with self._lock:
            worker.alive = False
            self._workers.pop(worker.id, None)
            job, worker.job = worker.job, None
            if job is None and start_failed and self._first_arrived() is not None:
                job = self._take_first()
            pidfd, worker.pidfd = worker.pidfd, None
            # A reserved place at the head restarts nothing: its unit's run() will.
            restart = self._first_arrived() is not None and not self._closed
            if restart:
                self._starting += 1
        if pidfd is not None:
            os.close(pidfd)
        if worker.tmpdir is not None:
            shutil.rmtree(worker.tmpdir, ignore_errors=True)
        if worker.stream_key is not None:
            self._reaper.close_stream(worker.stream_key)
        with contextlib.suppress(OSError):
            worker.sock.close()
        if job is not None:
            job.release_fds()
            tell(job.events)
        if restart:  # not on this (the Reaper) thread: a zygote start blocks
            self._start_worker_in_background()

    def _start_worker_in_background(self) -> None:
        """``_start_worker`` (its start counted already) on a short-lived thread of its own."""
        threading.Thread(
            target=self._start_worker, name="workunits-pool-start", daemon=True
        ).start()


class _WorkerEvents:
    """The zygote's events about one worker (Reaper thread; ``kill`` from any thread)."""

    __slots__ = ("pool", "worker")

    def __init__(self, pool: WorkerPool, worker: _Worker) -> None:
        self.pool = pool
        self.worker = worker

    def spawned(self, pid: int, pidfd: int) -> None:
        self.pool._spawned(self.worker, pid, pidfd)

    def spawn_failed(self, error: str) -> None:
        self.pool._worker_gone(
            self.worker, lambda events: events.spawn_failed(error), start_failed=True
        )

    def exited(self, exit_code: int | None, signum: int | None, limit: str | None = None) -> None:
        self.pool._worker_gone(self.worker, lambda events: events.exited(exit_code, signum, limit))

    def lost(self) -> None:
        self.pool._worker_gone(self.worker, lambda events: events.lost())

    def kill(self) -> None:
        self.pool._kill_now(self.worker)
