"""The worker side of a unit's stream: frames wait here until the generator yields them.

Runs inside a Ray worker. ``put`` is called from any thread there (the body, the
output pump, a teammate's handler); ``batches`` runs in the thread Ray drives
the generator from.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

from workunits._ray.worker.frames import Output

FIRST_LINGER = 0.05
"""Seconds the first batch waits for company: a unit shorter than this sends one item.

Each item costs about a Ray RPC; a short unit's start and result in one item are
what keep its overhead near a bare task's. The first output shows up this late.
"""

LINGER = 0.01
"""Seconds every later batch waits for company after its first frame."""

MAX_PENDING_OUTPUT = 8 << 20
"""Output bytes that may wait unsent before the output pump (and so the writer) blocks."""


class Outbox:
    def __init__(
        self,
        *,
        first_linger: float = FIRST_LINGER,
        linger: float = LINGER,
        max_pending_output: int = MAX_PENDING_OUTPUT,
    ) -> None:
        self._first_linger = first_linger
        self._linger = linger
        self._max_pending = max_pending_output
        # Guards _frames, _pending_output and _closed; held for O(1) work (append,
        # swap, count); waits on it release it, and frames are sent outside it.
        self._cond = threading.Condition()
        self._frames: list[Any] = []
        self._pending_output = 0
        self._closed = False

    def put(self, frame: Any, output_bytes: int = 0) -> bool:
        """Queue ``frame``; False once closed (the unit's stream has ended).

        A frame that carries output waits while too much output is unsent, so a
        unit that prints faster than the stream drains slows down instead of
        filling the worker's memory (Ray's backpressure blocks the generator).
        """
        with self._cond:
            while output_bytes and self._pending_output >= self._max_pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            self._frames.append(frame)
            self._pending_output += output_bytes
            self._cond.notify_all()
            return True

    def close(self) -> None:
        """No more frames: ``batches`` yields what is left, then stops."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def batches(self) -> Iterator[list[Any]]:
        """Yield lists of frames until closed and empty."""
        linger = self._first_linger
        while True:
            with self._cond:
                while not self._frames and not self._closed:
                    self._cond.wait()
                deadline = time.monotonic() + linger
                linger = self._linger
                while not self._closed and (remaining := deadline - time.monotonic()) > 0:
                    self._cond.wait(remaining)
                batch, self._frames = _joined(self._frames), []
                self._pending_output = 0
                done = self._closed
                self._cond.notify_all()
            if batch:
                yield batch
            if done:
                return


def _joined(frames: list[Any]) -> list[Any]:
    """Merge runs of output to one stream: Ray's ``sys.stdout`` writes each piece of
    a ``print`` separately, and a line should stay one transcript event."""
    joined: list[Any] = []
    for stream, run in itertools.groupby(frames, _stream_of):
        if stream is None:
            joined.extend(run)
        else:
            joined.append(Output(stream, "".join(frame.text for frame in run)))
    return joined


def _stream_of(frame: Any) -> str | None:
    return frame.stream if isinstance(frame, Output) else None
