"""The Reaper: one stream's end never stops it from serving the others.

Two ways it did (the README demo hung about once in thirty runs under load):
a final drain of a stream whose peer was still held open blocked in
``recvmsg``, because ``socket.recv_fds`` drops its ``MSG_DONTWAIT``; and a
close requested after a stream had already ended hit whichever newer stream
had been given the same descriptor number.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from workunits._zygote.reaper import Reaper

WAIT = 10.0


class Watched:
    """One socketpair: the Reaper watches ``ours``; the test writes on ``theirs``."""

    def __init__(self, reaper: Reaper) -> None:
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.received = bytearray()
        self.got_data = threading.Event()
        self.closed = threading.Event()
        self.key = reaper.watch_stream(self.ours, self._on_data, self.closed.set)

    def _on_data(self, data: bytes, fds: list[int]) -> None:
        self.received += data
        self.got_data.set()

    def says(self, data: bytes) -> None:
        """``data`` reaches the Reaper's callback (a stalled Reaper fails here)."""
        self.got_data.clear()
        self.theirs.sendall(data)
        assert self.got_data.wait(WAIT), "the Reaper did not read a stream that had data"
        assert self.received.endswith(data)

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    reaper = Reaper()
    yield reaper
    reaper.close()


def test_closing_a_stream_whose_peer_is_still_open_never_blocks_the_reaper(
    reaper: Reaper,
) -> None:
    # A unit's exit closes its channel while a copy of the unit's end may live on
    # (in a process it started); the final drain must not wait for that copy.
    held = Watched(reaper)
    held.says(b"last words")
    other = Watched(reaper)
    reaper.close_stream(held.key)
    assert held.closed.wait(WAIT)
    other.says(b"still served")
    assert held.received == b"last words"
    held.close()
    other.close()


def test_a_late_close_never_touches_a_newer_stream(reaper: Reaper) -> None:
    # The agent actor asks to close its channel when its process exits; by then the
    # Reaper may have seen end of file and closed its copy, freeing the number.
    for _ in range(20):  # a few rounds: the freed number is usually the next one taken
        first = Watched(reaper)
        first.theirs.close()
        assert first.closed.wait(WAIT)
        newer = Watched(reaper)
        reaper.close_stream(first.key)  # late: the first stream ended already
        barrier = Watched(reaper)
        reaper.close_stream(barrier.key)  # closes are served in order: a barrier
        assert barrier.closed.wait(WAIT)
        newer.says(b"alive")
        assert not newer.closed.is_set()
        first.ours.close()
        newer.close()
        barrier.close()


def test_descriptors_sent_with_a_chunk_reach_its_callback(reaper: Reaper) -> None:
    # The Reaper reads with recvmsg itself; the descriptors still come through.
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    got: list[tuple[bytes, list[int]]] = []
    arrived = threading.Event()

    def on_data(data: bytes, fds: list[int]) -> None:
        got.append((data, fds))
        arrived.set()

    reaper.watch_stream(ours, on_data, lambda: None)
    r, w = socket.socketpair()
    socket.send_fds(theirs, [b"x"], [r.fileno()])
    assert arrived.wait(WAIT)
    [(data, fds)] = got
    assert data == b"x"
    assert len(fds) == 1
    passed = socket.socket(fileno=fds[0])
    w.sendall(b"through the passed descriptor")
    assert passed.recv(64) == b"through the passed descriptor"
    for s in (passed, r, w, ours, theirs):
        s.close()
