"""Transcripts: an agent's JSONL event log, one orjson object per line.

Every event has ``seq`` (1, 2, 3…) and ``ts``. The unit process writes events
from ``start`` to ``result``/``error``; its WorkActor appends ``end`` after
the process is gone, continuing the sequence.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import orjson

from workunits._core.record import TAIL_BYTES


class TranscriptWriter:
    """Appends events to an ``O_APPEND`` descriptor; safe from several threads."""

    def __init__(self, fd: int, first_seq: int = 1) -> None:
        self._fd = fd
        self._seq = first_seq
        # Guards _seq and the order of lines in the file: held for one append (a
        # single write(2) to a local file, O_APPEND), never across a wait.
        self._lock = threading.Lock()

    def write(self, type_: str, **fields: Any) -> None:
        with self._lock:
            event = {"seq": self._seq, "ts": time.time(), "type": type_, **fields}
            line = orjson.dumps(event, default=repr) + b"\n"
            os.write(self._fd, line)
            self._seq += 1


def last_seq(path: str) -> int:
    """The ``seq`` of the last complete event in the transcript at ``path`` (0 if none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        return _last_seq_of(fd)
    finally:
        os.close(fd)


def _last_seq_of(fd: int) -> int:
    """``last_seq`` of an open transcript: its tail read with ``pread``, so a descriptor
    opened to append reads it too, and a look costs two system calls."""
    size = os.fstat(fd).st_size
    start = max(0, size - TAIL_BYTES)
    tail = os.pread(fd, size - start, start)
    for line in reversed(tail.splitlines()):
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("seq"), int):
            return int(event["seq"])
    return 0


def append_event(path: str, type_: str, **fields: Any) -> None:
    """Append one event after the process that wrote the rest is gone.

    One descriptor reads the last ``seq`` and appends after it: an agent's end
    costs its actor a handful of system calls, each a hand-off of the GIL under
    load, not the dozen two opens took."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        TranscriptWriter(fd, _last_seq_of(fd) + 1).write(type_, **fields)
    finally:
        os.close(fd)


def cut_to(path: str, cap: int) -> None:
    """Truncate the transcript at ``path`` to its whole lines within ``cap`` bytes.

    For a unit that wrote past its cap behind the capture's back; a no-op when
    the transcript is within it. Looks back at most ``TAIL_BYTES`` for a line end.
    """
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_size <= cap:
            return
        start = max(0, cap - TAIL_BYTES)
        window = os.pread(fd, cap - start, start)
        os.ftruncate(fd, start + window.rfind(b"\n") + 1)
    finally:
        os.close(fd)
