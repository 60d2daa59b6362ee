"""A TCP proxy between the ledger's clients and a test PostgreSQL server, that can cut a COMMIT.

It forwards bytes both ways, and reads the client's side as PostgreSQL's
wire protocol does (version 3): the untyped start-up messages, then typed
messages. It keeps, per connection, the SQL of the transaction under way --
from simple queries (``Q``) and from the extended protocol (``P`` parses a
statement, named or not; ``B`` binds one, so a prepared statement run again
without its text is still known). On command (``arm``), the next COMMIT of
a transaction whose SQL matches a pattern is cut:

- ``after``: the COMMIT is forwarded, the server's answer is awaited and
  thrown away, and both connections are closed: the write landed, and its
  writer never hears so (a crash or a network cut after the server committed);
- ``before``: both connections are closed instead of forwarding it: nothing
  landed (the same error, seen by the writer).

``refuse`` makes every new connection close at once (the server is away), so
a writer's read-back cannot reach it either. It runs an asyncio loop in a
thread of its own; every method is safe from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
_PROTOCOL_3 = 196608


@dataclass
class Armed:
    """One cut to make: ``fired`` is set once it was made."""

    pattern: re.Pattern[str]
    mode: str
    refuse_after: bool
    fired: threading.Event = field(default_factory=threading.Event)
    sql: list[str] = field(default_factory=list)  # the transaction it cut


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    started: bool = False  # past the start-up messages: typed messages from here on
    in_transaction: list[str] = field(default_factory=list)
    prepared: dict[str, str] = field(default_factory=dict)
    swallow_reply: bool = False  # cut as soon as the server answers


class CommitCutter:
    """The proxy; ``url(dbname)`` is what clients connect to instead of the server."""

    def __init__(self, socket_dir: Path, port: int = 5432) -> None:
        self._target = str(socket_dir / f".s.PGSQL.{port}")
        self._lock = threading.Lock()  # guards _armed, _refusing and _conns
        self._armed: list[Armed] = []
        self._refusing = False
        self._conns: set[_Conn] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0
        self.cuts = 0
        # Set at each connection refused (``refuse``): a client has met the outage.
        self.refused = threading.Event()

    def __enter__(self) -> CommitCutter:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def url(self, dbname: str, user: str = "workunits") -> str:
        return (
            f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}?sslmode=disable&gssencmode=disable"
        )

    def arm(self, pattern: str, *, mode: str = "after", refuse_after: bool = False) -> Armed:
        """Cut the next COMMIT of a transaction with a statement matching ``pattern``."""
        assert mode in ("after", "before"), mode
        armed = Armed(re.compile(pattern, re.IGNORECASE | re.DOTALL), mode, refuse_after)
        with self._lock:
            self._armed.append(armed)
        return armed

    def refuse(self, refusing: bool = True) -> None:
        """Close each new connection at once (True), or accept them again (False)."""
        with self._lock:
            self._refusing = refusing
            if refusing:
                self.refused.clear()

    def restart(self) -> None:
        """What a server restart looks like from here: every connection cut, new ones
        refused until ``refuse(False)``."""
        self.refuse(True)
        self.cut_all()

    def cut_all(self) -> None:
        """Close every connection now (the server restarted)."""
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            self._loop.call_soon_threadsafe(self._close, conn)

    # -- the loop's thread ---------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for conn in list(self._conns):
                self._close(conn)
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            refusing = self._refusing
        if refusing:
            writer.close()
            self.refused.set()
            return
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self._target)
        except OSError:
            writer.close()
            return
        conn = _Conn(writer, up_writer)
        with self._lock:
            self._conns.add(conn)
        try:
            await asyncio.gather(
                self._from_client(reader, conn), self._from_server(up_reader, conn)
            )
        finally:
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        with self._lock:
            self._conns.discard(conn)
        for writer in (conn.client, conn.server):
            with contextlib.suppress(Exception):
                writer.transport.abort()

    async def _from_server(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        try:
            while data := await reader.read(65536):
                if conn.swallow_reply:
                    break  # the answer to the COMMIT goes nowhere
                conn.client.write(data)
                await conn.client.drain()
        except (ConnectionError, OSError):
            pass  # either side went away: both are closed below
        self._close(conn)

    async def _from_client(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        try:
            while True:
                if not conn.started:
                    head = await reader.readexactly(8)
                    length, code = struct.unpack("!ii", head)
                    body = await reader.readexactly(length - 8)
                    conn.server.write(head + body)
                    if code == _PROTOCOL_3:
                        conn.started = True
                    elif code not in (_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST):
                        conn.started = True  # another protocol version: pass it on
                    await conn.server.drain()
                    continue
                kind = await reader.readexactly(1)
                (length,) = struct.unpack("!i", await reader.readexactly(4))
                body = await reader.readexactly(length - 4)
                message = kind + struct.pack("!i", length) + body
                cut = self._look(conn, kind, body)
                if cut is not None and cut.mode == "before":
                    self._fire(cut, conn)
                    self._close(conn)
                    return
                conn.server.write(message)
                await conn.server.drain()
                if cut is not None:
                    conn.swallow_reply = True
                    self._fire(cut, conn)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        self._close(conn)

    def _fire(self, cut: Armed, conn: _Conn) -> None:
        cut.sql = list(conn.in_transaction)
        self.cuts += 1
        if cut.refuse_after:
            self.refuse(True)
        cut.fired.set()

    def _look(self, conn: _Conn, kind: bytes, body: bytes) -> Armed | None:
        """Track the transaction's SQL; the cut to make at this message, if any."""
        sql: str | None = None
        if kind == b"Q":
            sql = body.rstrip(b"\0").decode("utf-8", "replace")
        elif kind == b"P":
            name, _, rest = body.partition(b"\0")
            text = rest.partition(b"\0")[0].decode("utf-8", "replace")
            conn.prepared[name.decode()] = text
            return None  # run at its Bind/Execute, and a COMMIT at its Sync
        elif kind == b"B":
            _portal, _, rest = body.partition(b"\0")
            statement = rest.partition(b"\0")[0].decode()
            sql = conn.prepared.get(statement)
        if sql is None:
            return None
        stripped = sql.strip().rstrip(";").strip().upper()
        if stripped.startswith("BEGIN"):
            conn.in_transaction = [sql]
            return None
        if stripped in ("COMMIT", "END"):
            done, conn.in_transaction = conn.in_transaction, []
            with self._lock:
                for armed in self._armed:
                    if any(armed.pattern.search(text) for text in done):
                        self._armed.remove(armed)
                        conn.in_transaction = done
                        return armed
            return None
        if stripped == "ROLLBACK":
            conn.in_transaction = []
            return None
        conn.in_transaction.append(sql)
        return None


@dataclass
class ProxiedLedger:
    """One PostgreSQL database, reached directly (the test's own looks) and through a
    ``CommitCutter`` (for the supervisor or client under test)."""

    direct: str
    proxied: str
    proxy: CommitCutter


@contextlib.contextmanager
def proxied_ledger(
    socket_dir: Path, database: contextlib.AbstractContextManager[str]
) -> Iterator[ProxiedLedger]:
    """A fresh database (``database``, e.g. ``postgres_server.database()``) and a proxy
    in front of the server at ``socket_dir``."""
    with CommitCutter(socket_dir) as proxy, database as url:
        name = urllib.parse.urlsplit(url).path.lstrip("/")
        yield ProxiedLedger(url, proxy.url(name), proxy)
