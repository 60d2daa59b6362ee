"""Length-prefixed pickle frames over a stream socket.

Both the zygote's control socket and an agent's channel speak this. Frames are
written with cloudpickle: a request from the supervisor to a unit may carry
code by value. What a *unit* writes is not trusted (it may run any code, an
LLM's included): the supervisor reads it with a ``RestrictedReader``, whose
unpickler finds only the classes it is given (``_wire.untrusted``), so a
frame can build plain data and nothing else -- never call a function of its
choosing in the supervisor's process.
"""

from __future__ import annotations

import functools
import io
import pickle
import socket
import struct
from typing import Any, ClassVar

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
            frames.append(self._load(self._buf[_HEADER.size : end]))
            del self._buf[:end]
        return frames

    def _load(self, body: bytes | bytearray) -> Any:
        return pickle.loads(body)  # noqa: S301 - a trusted peer (see RestrictedReader)


class _Restricted(pickle.Unpickler):
    """An unpickler that finds only the (module, name) pairs in ``allowed``."""

    allowed: frozenset[tuple[str, str]] = frozenset()
    # What ``allowed`` names, looked up once per class (each class has its own).
    found: ClassVar[dict[tuple[str, str], Any]] = {}

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        found = self.found.get(key)
        if found is not None:
            return found
        if key not in self.allowed:
            raise pickle.UnpicklingError(
                f"a unit's frame named {module}.{name}, which it may not send"
            )
        found = self.found[key] = super().find_class(module, name)
        return found


@functools.cache
def _unpickler_for(allowed: frozenset[tuple[str, str]]) -> type[_Restricted]:
    """One unpickler class per allowed set, not one per reader: every agent's channel
    has a reader, and making a class took ~13 us of each unit's Reaper time."""

    class Unpickler(_Restricted):
        pass

    Unpickler.allowed = allowed
    Unpickler.found = {}
    return Unpickler


class RestrictedReader(FrameReader):
    """A FrameReader for frames from an untrusted peer: only ``allowed`` classes load."""

    def __init__(self, allowed: frozenset[tuple[str, str]]) -> None:
        super().__init__()
        self._unpickler = _unpickler_for(allowed)

    def _load(self, body: bytes | bytearray) -> Any:
        return self._unpickler(io.BytesIO(body)).load()


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
