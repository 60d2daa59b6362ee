"""Follow a unit's Ray stream in a thread and tell the unit's actor what came.

Runs in the supervisor process. A follower thread blocks in Ray (``next`` on the
stream) so that no pykka actor ever does; it only tells. Each running remote
unit has one, taken from a pool of reusable daemon threads: starting a thread
costs about half a millisecond on a busy driver, a good part of a short unit's
whole bookkeeping. A thread idle for ``IDLE_EXIT`` seconds ends, and ``close``
ends the idle ones at once (a busy one ends with its stream: close kills the units).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IDLE_EXIT = 60.0

Tell = Callable[[Any], bool]  # False once nobody listens any more


@dataclass(frozen=True, slots=True)
class Batch:
    frames: list[Any]


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The generator returned: every frame it yielded has been told before this."""


@dataclass(frozen=True, slots=True)
class StreamFailed:
    lost: bool  # the worker, its node or its actor went away under the unit
    error: str


@dataclass(frozen=True, slots=True)
class _FollowJob:
    stream: Any
    tell: Tell
    name: str


class Followers:
    """A pool of follower threads; ``follow`` is called from unit actor threads."""

    def __init__(self) -> None:
        # Guards _idle and _closed; held for O(1) work (a list pop or append).
        self._lock = threading.Lock()
        # Each idle thread's own inbox; None in it tells the thread to end.
        self._idle: list[queue.SimpleQueue[_FollowJob | None]] = []
        self._closed = False

    def follow(self, stream: Any, tell: Tell, name: str) -> None:
        """Read ``stream`` to its end in a pool thread, telling each batch, then its end."""
        job = _FollowJob(stream, tell, name)
        with self._lock:
            inbox = self._idle.pop() if self._idle and not self._closed else None
        if inbox is not None:
            inbox.put(job)
            return
        thread = threading.Thread(target=self._run, args=(job,), name=name, daemon=True)
        thread.start()

    def close(self) -> None:
        """End the idle threads now; no thread waits for work after this."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    def _run(self, first: _FollowJob) -> None:
        inbox: queue.SimpleQueue[_FollowJob | None] = queue.SimpleQueue()
        job: _FollowJob | None = first
        while job is not None:
            threading.current_thread().name = job.name
            follow(job.stream, job.tell)
            with self._lock:
                if self._closed:
                    return
                self._idle.append(inbox)
            try:
                job = inbox.get(timeout=IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                job = inbox.get()  # taken off the idle list just now: its job is on the way


def follow(stream: Any, tell: Tell) -> None:
    """Read ``stream`` to its end in this thread."""
    import ray  # noqa: PLC0415 - a stream exists only once ray is imported

    try:
        for ref in stream:
            if not tell(Batch(ray.get(ref))):
                return
    except Exception as exc:  # noqa: BLE001 - how the stream broke decides the outcome
        tell(describe_failure(exc))
        return
    tell(StreamEnded())


def describe_failure(exc: BaseException) -> StreamFailed:
    """Sort a Ray error into "the unit's process or node went away" (lost) or not."""
    from ray import exceptions as rx  # noqa: PLC0415

    lost_types = (rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError, rx.ActorDiedError)
    # Not lost: OutOfMemoryError (Ray's memory monitor killed the unit for its own use
    # of memory: a crash of the unit, as the OOM killer is for an agent) and the rest.
    lost = isinstance(exc, lost_types)
    text = str(exc).strip() or "(no message)"
    return StreamFailed(lost, f"{type(exc).__name__}: {text}")
