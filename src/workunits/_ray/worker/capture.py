"""Capture a Ray worker's file descriptors 1 and 2 into ``Output`` frames, for one unit.

Runs inside a Ray worker, which runs one task at a time, so swapping its fds
for the length of a task captures exactly that task's output (including C code
and subprocesses writing to them) and leaves the worker as it was for the next
task. One pump thread polls both pipes. ``sys.stdout``/``sys.stderr`` are line
buffered meanwhile, as in an agent: Ray's own unbuffered streams write each
piece of a ``print`` apart, which would split lines across transcript events.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import sys
import threading
from typing import TextIO

from workunits._ray.worker.frames import Output
from workunits._ray.worker.outbox import Outbox

_STREAMS = ((1, "stdout"), (2, "stderr"))
_POLL_MS = 100  # how often a pump still held open by a straggler checks for stop


class FdCapture:
    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox
        self._saved: dict[int, int] = {}
        self._names: dict[int, str] = {}
        # Per stream, so a character split across two reads is not mangled.
        self._decoders: dict[int, codecs.IncrementalDecoder] = {}
        self._stopping = threading.Event()
        self._pump: threading.Thread | None = None
        self._streams: tuple[TextIO, TextIO] | None = None  # the worker's own, put back at stop

    def start(self) -> None:
        """Called in the thread that starts the unit, before its code runs."""
        _flush_std()
        for target, name in _STREAMS:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            self._saved[target] = os.dup(target)
            os.dup2(write_end, target)  # inheritable: subprocesses write here too
            os.close(write_end)
            self._names[read_end] = name
            self._decoders[read_end] = codecs.getincrementaldecoder("utf-8")("replace")
        self._streams = (sys.stdout, sys.stderr)
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
        self._pump = threading.Thread(target=self._run, name="workunits-capture", daemon=True)
        self._pump.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Put the worker's own fds back and deliver what the pipes still hold.

        A subprocess that outlives the unit keeps a pipe open; after ``timeout``
        its later output is dropped rather than letting the unit wait for it.
        """
        _flush_std()
        if self._streams is not None:
            ours = (sys.stdout, sys.stderr)
            sys.stdout, sys.stderr = self._streams
            self._streams = None
            for stream in ours:
                with contextlib.suppress(Exception):
                    stream.close()  # closefd=False: fds 1 and 2 stay open
        for target, saved in self._saved.items():
            os.dup2(saved, target)  # drops our write end: the pump sees EOF
            os.close(saved)
        self._saved.clear()
        if self._pump is not None:
            self._pump.join(timeout)
            self._stopping.set()
            self._pump.join(timeout)

    def _run(self) -> None:
        """The pump thread: read both pipes until EOF (or stop), then close them."""
        poller = select.poll()
        for fd in self._names:
            poller.register(fd, select.POLLIN)
        open_fds = set(self._names)
        try:
            while open_fds and not self._stopping.is_set():
                for fd, _ in poller.poll(_POLL_MS):
                    chunk = os.read(fd, 1 << 16)
                    text = self._decoders[fd].decode(chunk, final=not chunk)
                    if text:
                        self._outbox.put(Output(self._names[fd], text), len(chunk))
                    if not chunk:
                        poller.unregister(fd)
                        open_fds.discard(fd)
        finally:
            for fd in self._names:
                os.close(fd)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a replaced or closed stream is not ours to fix
            stream.flush()
