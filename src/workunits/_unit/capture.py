"""The unit process's capture: the one writer of its transcript.

Runs in the unit process. Every source of the transcript goes through one
``Capture``, under one lock, stamped from one sequence:

- the unit's ``sys.stdout`` and ``sys.stderr`` (our text streams: what they
  flush, a line at a time, reaches the capture at once, in the writing thread);
- bytes that reach fds 1 and 2 some other way (a subprocess, C code,
  ``os.write``), through a pipe per fd;
- events: ``start``, ``ctx.emit``/``progress``/``checkpoint``, ``result``…

So the transcript holds them in the order the unit produced them, as seen by
the capture: a write counts when it is flushed. Before anything is stamped, the
pipes are drained of what is already in them, so ``subprocess.run(["echo"])``
then ``ctx.emit`` records the echo first. Writes to the two pipes are ordered
only against everything else, not against each other (nothing tells which of
two pipes was written first).

A line after a quiet spell of its stream is written before ``print`` returns
(a unit that dies at once, by ``os._exit`` or a signal, loses only lines that
came within ``LINGER_MS`` of an earlier one). Lines that follow each other
fast are batched into one event (up to ``BATCH_BYTES``) until
anything else is written or, ``LINGER_MS`` later, the pump thread writes them:
a unit that prints a lot costs less than it did through a pipe. The pump also
reads the pipes. The capture counts the bytes it writes and
writes no line that would take the transcript past its cap: the first such
line stops it for good, and ``on_cap`` is called once (outside the lock), so
the unit is killed with reason ``output-cap``. A unit that writes its transcript
behind our back is the supervisor's to catch (it checks sizes too).
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import io
import itertools
import os
import select
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from workunits._core.record import storable_text
from workunits._util.strictjson import INT_MAX, INT_MIN

BATCH_BYTES = 1 << 16  # one event holds at most this much of one stream's text (and a pipe read)
STREAMS = ((1, "stdout"), (2, "stderr"))
# A line flushed this soon after its stream's last batch was written joins a
# batch that the pump writes after this long; a line after a quiet spell is
# written at once (before ``print`` returns: it may be the last words of a unit
# about to crash).
LINGER_MS = 5


class Capture:
    """Owns the transcript descriptor of a unit process; safe from any thread.

    Made in two steps, so a warm process does the first before it knows its
    unit: ``start`` routes fds 1 and 2 and starts the pump, ``bind`` names the
    transcript, its first sequence number and its cap, and lets the pump run.

    A ``reusable`` capture (a pooled worker's) serves unit after unit: ``unbind``
    ends a unit's part (what it wrote is in its transcript, nothing more goes
    there) and ``rearm`` readies the next, keeping the pipes and the pump.
    """

    def __init__(self, *, reusable: bool = False) -> None:
        self._reusable = reusable
        self._write_ends: list[tuple[int, int]] = []  # (fd 1 or 2, its pipe), when reusable
        self._fd = -1  # the transcript, from ``bind``
        self._cap: int | None = None
        self._size = 0
        self._seqs = itertools.count(1)  # next() is one step, even for a re-entrant writer
        # Set by ``bind``: the pump waits for it, and events made before it wait in _early.
        self._bound = threading.Event()
        self._early: list[tuple[str, dict[str, Any]]] = []
        # Re-entrant: a signal handler that prints runs in the thread that may hold it.
        # Guards the sequence, the size, the batch, the pipes, _early and the cap state.
        self._lock = threading.RLock()
        self._batch_stream = ""
        self._batch: list[str] = []
        self._batch_size = 0
        self._last_batch = {"stdout": 0.0, "stderr": 0.0}  # when each last had a batch written
        self._pipes: dict[int, _Pipe] = {}
        self._peek = select.poll()  # writers' look at the pipes (a poll object is one thread's)
        self._closing = False
        self._capped = False
        self._cap_reported = False
        self._on_cap: Callable[[], None] | None = None
        self._wake_fd = -1
        self._pump: threading.Thread | None = None
        self._streams: list[io.TextIOWrapper[_StreamSink]] = []

    # -- set-up and tear-down (the unit's main thread) ----------------------------

    def start(self) -> None:
        """Route fds 1 and 2 through pipes, point ``sys.stdout``/``sys.stderr`` here, pump.

        The pump waits for ``bind``; until then nothing reaches a transcript.
        """
        for target, name in STREAMS:
            read_end, write_end = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            os.set_blocking(write_end, True)
            os.dup2(write_end, target)  # the dup is inheritable: subprocesses write here too
            if self._reusable:  # kept, to point fd 1 or 2 back here for the next unit
                self._write_ends.append((target, write_end))
            else:
                os.close(write_end)
            self._pipes[read_end] = _Pipe(name)
            self._peek.register(read_end, select.POLLIN)
        self._wake_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        sys.stdout = self._text_stream(1, "stdout")
        sys.stderr = self._text_stream(2, "stderr")
        # One thread for both pipes and the wake-ups: a thread costs a fresh fork more
        # than a poll does.
        self._pump = threading.Thread(target=self._run_pump, name="workunits-capture", daemon=True)
        self._pump.start()

    def bind(self, fd: int, first_seq: int, cap: int | None, on_cap: Callable[[], None]) -> None:
        """Write to the transcript ``fd`` from now on; what came before is written first."""
        with self._lock:
            self._fd = fd
            self._cap = cap
            # A resumed attempt appends: its cap counts what earlier attempts wrote.
            self._size = os.fstat(fd).st_size
            self._seqs = itertools.count(first_seq)
            self._on_cap = on_cap
            early, self._early = self._early, []
            for type_, fields in early:
                self._write_event(type_, fields)
        self._bound.set()
        self._report_cap()

    def unbind(self) -> None:
        """A reusable capture's unit is over: what it (and what it left running) wrote so
        far goes to its transcript, and nothing more does; its cap no longer holds.

        Written later (by a thread the unit left) waits for the next ``bind``, as
        anything written before a unit's ``bind`` does.
        """
        self._flush_streams()
        with self._lock:
            self._drain_pipes()
            self._write_batch()
        self._report_cap()
        with self._lock:
            self._fd = -1
            self._cap = None
            self._size = 0
            self._capped = self._cap_reported = False
            self._on_cap = None

    def rearm(self) -> None:
        """A reusable capture before its next unit: fds 1 and 2 back on its pipes and
        fresh text streams (the last unit may have moved or closed either)."""
        for target, write_end in self._write_ends:
            os.dup2(write_end, target)
        self._flush_streams()
        self._streams = []
        sys.stdout = self._text_stream(1, "stdout")
        sys.stderr = self._text_stream(2, "stderr")

    def _text_stream(self, fd: int, name: str) -> io.TextIOWrapper[_StreamSink]:
        raw = _StreamSink(self, fd, name)
        stream = io.TextIOWrapper(
            raw,
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        self._streams.append(stream)
        return stream

    def close(self, timeout: float) -> None:
        """Flush the streams, let the pipes reach EOF and drain, and stop the pump.

        Pipes that nobody else holds are at EOF at once: this thread drains them,
        and the pump, which has nothing left to write, is not waited for (a
        thread switch on the way out of every unit). A pipe that a subprocess
        still holds is the pump's to drain, for up to ``timeout`` seconds.
        """
        self._flush_streams()
        self._closing = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            # Points 1 and 2 at /dev/null so the pipes see EOF once subprocesses let go.
            for target, _ in STREAMS:
                os.dup2(devnull, target)
        finally:
            os.close(devnull)
        with self._lock:
            self._drain_pipes()
            for fd in list(self._pipes):
                self._read_pipe(fd)  # EOF closes it; anything else means a writer is left
            if not self._pipes:
                self._pump = None  # from here on, batches are written as they come
        self._bound.set()  # a pump still waiting for its unit has nothing to write: let it end
        self._wake()
        if self._pump is not None:
            self._pump.join(timeout)
        with self._lock:
            self._pump = None
            self._write_batch()
        self._report_cap()

    # -- the sources --------------------------------------------------------------

    def write(self, type_: str, **fields: Any) -> None:
        """Write one event, after everything the unit had written before it."""
        self._flush_streams()
        with self._lock:
            self._drain_pipes()
            self._write_batch()
            self._write_event(type_, fields)
        self._report_cap()

    def output(self, name: str, text: str) -> None:
        """Text flushed by ``sys.stdout``/``sys.stderr`` (the writing thread)."""
        wake = False
        with self._lock:
            if self._capped:
                return
            self._drain_pipes()
            if self._batch_stream != name:
                self._write_batch()
                self._batch_stream = name
            wake = not self._batch and self._pump is not None
            self._batch.append(text)
            self._batch_size += len(text)
            if (
                self._batch_size >= BATCH_BYTES
                or self._pump is None
                or time.monotonic() - self._last_batch[name] >= LINGER_MS / 1000
            ):
                self._write_batch()
                wake = False
        if wake:
            self._wake()
        self._report_cap()

    def _flush_streams(self) -> None:
        for stream in self._streams:
            with contextlib.suppress(ValueError, OSError):  # closed by the unit's code
                stream.flush()

    # -- the pump thread --------------------------------------------------------------

    def _run_pump(self) -> None:
        """Write batches when woken, and what the pipes bring, until both pipes close."""
        pipes = select.poll()
        for fd in self._pipes:
            pipes.register(fd, select.POLLIN)
        either = select.poll()
        either.register(self._wake_fd, select.POLLIN)
        self._bound.wait()  # a warm process's pump is started before its unit is known
        for fd in self._pipes:
            either.register(fd, select.POLLIN)
        while True:
            ready = {fd for fd, _ in either.poll()}
            if ready == {self._wake_fd} and not self._closing:
                # Only a batch of a busy stream to write: let it grow for a moment
                # (unless a pipe has data). A write per line would cost the unit more
                # than the pipe did.
                ready = {fd for fd, _ in pipes.poll(LINGER_MS)}
            # Read after the linger, before the batch is written: a wake-up that
            # comes later is for a batch we have not written, so none is lost.
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._wake_fd)
            with self._lock:
                self._write_batch()  # older than what the pipes hold now
                for fd in ready & self._pipes.keys():
                    self._read_pipe(fd)
                    if fd not in self._pipes:
                        pipes.unregister(fd)
                        either.unregister(fd)
                if not self._pipes and self._closing:
                    return
            self._report_cap()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.eventfd_write(self._wake_fd, 1)

    # -- under the lock -----------------------------------------------------------------

    def _drain_pipes(self) -> None:
        """Write what the pipes hold now, so it comes before what is written next.

        Reads what each pipe held when we looked and no more, so a writer that
        keeps filling a pipe cannot hold us here.
        """
        if not self._pipes:
            return
        for fd, _ in self._peek.poll(0):
            if fd not in self._pipes:
                continue
            held = _bytes_in(fd)
            while held > 0:
                got = self._read_pipe(fd)
                if not got:
                    break
                held -= got

    def _read_pipe(self, fd: int) -> int:
        """Read one chunk of the pipe ``fd`` into the transcript; how many bytes (0: none).

        At EOF the pipe is closed.
        """
        pipe = self._pipes[fd]
        try:
            chunk = os.read(fd, BATCH_BYTES)
        except BlockingIOError:
            return 0
        text = pipe.decoder.decode(chunk, final=not chunk)
        if text:
            self._write_batch()  # what the unit flushed before reading this is older
            self._write_event(pipe.name, {"data": text})
        if not chunk:
            del self._pipes[fd]
            self._peek.unregister(fd)
            os.close(fd)
        return len(chunk)

    def _write_batch(self) -> None:
        if not self._batch:
            return
        text = "".join(self._batch)
        self._batch = []
        self._batch_size = 0
        self._last_batch[self._batch_stream] = time.monotonic()
        self._write_event(self._batch_stream, {"data": text})

    def _write_event(self, type_: str, fields: dict[str, Any]) -> None:
        if self._capped:
            return
        if self._fd < 0:  # before ``bind``: numbered and written by it
            self._early.append((type_, fields))
            return
        # A line the cap refuses leaves a hole in the sequence: nothing follows it.
        event = {"seq": next(self._seqs), "ts": time.time(), "type": type_, **fields}
        try:
            line = orjson.dumps(event, default=repr) + b"\n"
        except TypeError:  # text orjson refuses (a lone surrogate: an undecodable path)...
            line = orjson.dumps(_encodable(event), default=repr) + b"\n"
        if self._cap is not None and self._size + len(line) > self._cap:
            self._capped = True  # for good: the unit is being killed
            self._batch = []
            self._batch_size = 0
            return
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]
        self._size += len(line)

    # -- the cap ----------------------------------------------------------------------------

    def _report_cap(self) -> None:
        """Tell the unit's actor, once, that the cap stopped us (never under the lock)."""
        if not self._capped or self._cap_reported:
            return
        with self._lock:
            if self._cap_reported:
                return
            self._cap_reported = True
        if self._on_cap is not None:
            self._on_cap()


def _bytes_in(fd: int) -> int:
    """How many bytes the pipe ``fd`` holds now."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


class _Pipe:
    """One captured fd's pipe: its stream name and the decoder that keeps split characters whole."""

    __slots__ = ("decoder", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")


class _StreamSink(io.BufferedIOBase):
    """What ``sys.stdout``/``sys.stderr`` flush into: straight to the capture, unbuffered.

    ``fileno()`` is the real fd (1 or 2), so a subprocess handed ``sys.stdout``
    writes into the captured pipe; ``.buffer.write(b"...")`` works as usual.
    """

    def __init__(self, capture: Capture, fd: int, name: str) -> None:
        super().__init__()
        self._capture = capture
        self._fd = fd
        self._name = name
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    @property
    def name(self) -> str:
        return f"<{self._name}>"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        text = self._decoder.decode(chunk)
        if text:
            self._capture.output(self._name, text)
        return len(chunk)


def _encodable(value: Any) -> Any:
    """``value`` with what orjson refuses made writable: text escaped as the ledger keeps
    it, keys made text, integers beyond 64 bits written as text. A transcript line is a
    record of what happened; it must not fail the unit it records (an exception's
    message may name a file whose name is not UTF-8)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {
            storable_text(k if isinstance(k, str) else repr(k)): _encodable(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return value if INT_MIN <= value <= INT_MAX else str(value)
    return value
