"""The gateway: where ``workunits`` commands run inside a unit reach the supervisor.

A socket in a private directory of the system's temp dir (the state dir is
hidden from units); each unit's environment names it, with the unit's ID and
token (``_wire.gateway_protocol``). A connection says ``Hello``; its requests
then go to the supervisor actor as the unit's own channel's would (spawn a
child, get / kill / cancel / list its descendants), each with a route that
answers on this connection. Frames are read with the restricted unpickler a
unit's channel has (``_wire.untrusted``).

Threads: one accepts (``workunits-gateway``); each connection has its own,
short-lived, which reads a request, tells the actor, and waits (bounded) for
the answer the route hands it. The actor's thread only puts the answer in a
queue: a command that stops reading never holds it.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import queue
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from workunits._core import ids as _ids
from workunits._util import framing
from workunits._wire import frames as m
from workunits._wire.actor_messages import ControlChild, SpawnChild
from workunits._wire.gateway_protocol import ENV_GATEWAY, ENV_TOKEN, ENV_UNIT, Hello, token_of
from workunits._wire.untrusted import unit_frames

log = logging.getLogger(__name__)

HELLO_TIMEOUT = 5.0  # seconds a new connection has to say who it is
ANSWER_TIMEOUT = 60.0  # seconds a request waits for the actor's answer


# A socket's path holds at most 107 bytes: a long TMPDIR gives way to these.
_MAX_PATH = 100
_SHORT_TEMP_DIRS = ("/tmp", "/dev/shm")  # noqa: S108 - mkdtemp in them: a private dir


def _private_dir() -> str:
    """A new 0700 directory for the socket, in the system's temp dir if its path is short."""
    for where in (tempfile.gettempdir(), *_SHORT_TEMP_DIRS):
        if len(where) + 60 <= _MAX_PATH and os.access(where, os.W_OK | os.X_OK):
            return tempfile.mkdtemp(prefix=f"workunits-{os.geteuid()}-gateway-", dir=where)
    raise OSError(f"no temp dir with a path short enough for a socket ({_MAX_PATH} bytes)")


class Gateway:
    """One supervisor's gateway; ``close`` ends it (any thread)."""

    def __init__(self, tell: Callable[[object], None]) -> None:
        """OSError when no socket can be made (the caller goes on without a gateway)."""
        self._tell = tell
        self._key = secrets.token_bytes(32)
        self._dir = _private_dir()
        self.path = os.path.join(self._dir, "gateway.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(self.path)
            self._server.listen(64)
        except OSError:
            self._server.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        # Guards _conns and _closed: a set's add/discard and a flag, O(1).
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="workunits-gateway", daemon=True)
        self._thread.start()

    def environment(self, unit_id: str) -> dict[str, str]:
        """What a unit's environment holds to reach the supervisor from its commands."""
        return {ENV_GATEWAY: self.path, ENV_UNIT: unit_id, ENV_TOKEN: token_of(self._key, unit_id)}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        shutil.rmtree(self._dir, ignore_errors=True)

    # -- threads ------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.add(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="workunits-gateway-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            said = self._hello(conn)
            if said is not None:
                self._requests(conn, *said)
        except (OSError, EOFError, ValueError) as exc:
            log.debug("gateway: a connection ended: %s", exc)
        except Exception:
            log.debug("gateway: a connection sent what is not a request", exc_info=True)
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _hello(self, conn: socket.socket) -> tuple[str, framing.FrameReader, list[Any]] | None:
        """Who the connection speaks for (its reader, and frames read after the Hello)."""
        conn.settimeout(HELLO_TIMEOUT)
        reader = unit_frames()
        frames: list[Any] = []
        while not frames:
            frames = framing.recv_blocking(conn, reader)
        hello = frames[0]
        if not isinstance(hello, Hello) or not _ids.is_valid(hello.unit_id):
            return None
        if not hmac.compare_digest(token_of(self._key, hello.unit_id), str(hello.token)):
            framing.send(conn, m.Reply(0, False, "the unit's token does not match"), plain=True)
            return None
        framing.send(conn, m.Reply(0, True, hello.unit_id), plain=True)
        conn.settimeout(None)
        return hello.unit_id, reader, frames[1:]

    def _requests(
        self, conn: socket.socket, unit_id: str, reader: framing.FrameReader, frames: list[Any]
    ) -> None:
        while True:
            while not frames:
                frames = framing.recv_blocking(conn, reader)
            frame = frames.pop(0)
            answers: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

            def route(ok: bool, value: Any, answers: queue.SimpleQueue[Any] = answers) -> None:
                answers.put((ok, value))  # the actor's thread: never blocks

            if isinstance(frame, m.Spawn):
                self._tell(SpawnChild(unit_id, frame, route))
            elif isinstance(frame, m.Control) and frame.op != "signals":
                self._tell(ControlChild(unit_id, frame, route))
            else:
                return
            try:
                ok, value = answers.get(timeout=ANSWER_TIMEOUT)
            except queue.Empty:
                ok, value = False, "the supervisor did not answer in time"
            framing.send(conn, m.Reply(frame.req, ok, value))
