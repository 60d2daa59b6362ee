"""Length-prefixed pickle frames over a stream socket.

Both the zygote's control socket and an agent's channel speak this. Peers are
our own processes on a socketpair, so pickle is trusted here. Frames are
written with cloudpickle: a spawn request from inside a unit carries the
callable of the child it asks for, which may exist only by value.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

import cloudpickle

from workunits._core.errors import InvalidArgument

_HEADER = struct.Struct("!I")
MAX_FRAME = 1 << 30


def encode(obj: Any) -> bytes:
    return frame(bytes(cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)))


def encode_plain(obj: Any) -> bytes:
    """A frame written with plain pickle: for messages that hold no code (faster to write)."""
    return frame(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def frame(body: bytes) -> bytes:
    """A frame of an already pickled ``body`` (passed on without being opened).

    InvalidArgument for a body past ``MAX_FRAME``, which the reader would refuse:
    the sender hears of it, and nothing is sent.
    """
    if len(body) > MAX_FRAME:
        raise InvalidArgument(
            f"a message of {len(body)} bytes is larger than the {MAX_FRAME} bytes a frame "
            f"may carry; nothing was sent"
        )
    return _HEADER.pack(len(body)) + body


class FrameReader:
    """Accumulates bytes and returns every complete frame, in order."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def held(self) -> int:
        """Bytes of a frame not complete yet (0 between frames)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Any]:
        self._buf += data
        frames: list[Any] = []
        while len(self._buf) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buf)
            if length > MAX_FRAME:
                raise ValueError(f"frame of {length} bytes is larger than {MAX_FRAME}")
            end = _HEADER.size + length
            if len(self._buf) < end:
                break
            frames.append(pickle.loads(self._buf[_HEADER.size : end]))  # noqa: S301 - our own peer
            del self._buf[:end]
        return frames


def send(
    sock: socket.socket, obj: Any, fds: list[int] | None = None, *, plain: bool = False
) -> None:
    """Send one frame, with file descriptors attached when given (SCM_RIGHTS).

    ``plain``: pickle, not cloudpickle (see ``encode_plain``).
    """
    data = encode_plain(obj) if plain else encode(obj)
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:
        sock.sendall(data)


def recv_blocking(sock: socket.socket, reader: FrameReader) -> list[Any]:
    """Read once (blocking) and return the frames completed; [] with EOF raises EOFError."""
    data = sock.recv(1 << 16)
    if not data:
        raise EOFError
    return reader.feed(data)
