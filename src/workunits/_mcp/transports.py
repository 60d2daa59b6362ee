"""Serving an :class:`McpServer` on stdio or on streamable HTTP, and stopping cleanly.

stdio: ``claim_stdio`` moves the wire to private descriptors first thing and
points fd 1 at stderr and fd 0 at the null device, so nothing but JSON-RPC
reaches stdout: not a module's import-time print, not the zygote, not a unit
(which writes to its output file anyway). One client, one session.

HTTP: the SDK's streamable-HTTP app behind the same guard as ``serve --http``
(the state dir's bearer token, Host and Origin checks). Notices are claimed
per MCP session, so HTTP serves the protocol versions that have sessions (the
``initialize`` handshake, up to 2025-11-25): a request of a later, sessionless
version is answered -32022 with the versions served, and clients (the SDK's
own included) fall back to the handshake. A session ends when its client
deletes it or it idles out; what it held of the notices goes back.

Both stop on SIGTERM, SIGINT or SIGHUP, and when stdin closes (stdio): the
sessions' unacknowledged notices are released, then the fleet is closed as a
deploy (a supervisor of its own hands resumable units over to the next start).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import anyio
import orjson
from mcp.server.stdio import stdio_server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from workunits._mcp.notices import NoticeDesk
from workunits._mcp.server import STDIO_SESSION, McpServer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
MCP_PATH = "/mcp"
UNSUPPORTED_VERSION = -32022


async def _until_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for _ in signals:
            scope.cancel()
            return


def claim_stdio() -> tuple[int, int]:
    """Take stdin and stdout for the JSON-RPC wire, before anything else can write.

    Returns private descriptors of the wire (close-on-exec, above 2); fd 0
    then reads the null device and fd 1 writes to stderr, for this process
    and everything it starts: a module ``--import`` imports, the zygote, the
    units. Called first thing by ``workunits mcp`` on stdio.
    """
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


async def serve_stdio(wire: tuple[int, int], server: McpServer, desk: NoticeDesk) -> None:
    """Serve one client on the ``wire`` (``claim_stdio``) until it closes it or a stop
    signal comes; then give back what its session holds and close the fleet."""
    reader = io.TextIOWrapper(os.fdopen(wire[0], "rb"), encoding="utf-8", errors="replace")
    writer = io.TextIOWrapper(os.fdopen(wire[1], "wb"), encoding="utf-8")
    try:
        async with (
            stdio_server(anyio.wrap_file(reader), anyio.wrap_file(writer)) as (read, write),
            anyio.create_task_group() as tg,
            server.running(),
        ):
            tg.start_soon(_until_signal, tg.cancel_scope)
            options = server.lowlevel.create_initialization_options()
            await server.lowlevel.run(read, write, options)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_shut, server, desk)


def _shut(server: McpServer, desk: NoticeDesk) -> None:
    desk.end(STDIO_SESSION)
    desk.end_all()
    server.tools.fleet.close(deploy=True)
    server.calls.close()


async def serve_http(
    server: McpServer,
    desk: NoticeDesk,
    *,
    host: str,
    port: int,
    token: str,
    idle: float,
    announce: Callable[[str], None],
    tls: tuple[str, str] | None = None,
) -> None:
    """Serve streamable HTTP at ``http(s)://host:port/mcp`` until a stop signal comes."""
    import uvicorn  # noqa: PLC0415 - the [http] extra's; stdio never needs it

    from workunits._http.security import Guard  # noqa: PLC0415

    app = server.lowlevel.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, session_idle_timeout=idle
    )
    guard = Guard(EraGate(SessionWatch(app, desk)), token=token, tls=tls is not None)
    config = uvicorn.Config(
        guard,
        host=host,
        port=port,
        ssl_certfile=None if tls is None else tls[0],
        ssl_keyfile=None if tls is None else tls[1],
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    web = _web_class()(config)
    try:
        async with anyio.create_task_group() as tg, server.running():

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
                    async for _ in signals:
                        web.should_exit = True
                        return

            async def sweep() -> None:
                while True:  # sessions that left without a DELETE
                    await anyio.sleep(min(idle / 4, 30.0))
                    await anyio.to_thread.run_sync(desk.end_idle, idle)

            async def announce_when_bound() -> None:
                while not web.started:
                    await anyio.sleep(0.01)
                bound = web.servers[0].sockets[0].getsockname()[1]
                guard.allow(host, bound)
                shown = f"[{host}]" if ":" in host else host
                scheme = "https" if tls else "http"
                announce(f"{scheme}://{shown}:{bound}{MCP_PATH}")

            tg.start_soon(stop_on_signal)
            tg.start_soon(sweep)
            tg.start_soon(announce_when_bound)
            await web.serve()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_shut, server, desk)


def _web_class() -> type[Any]:
    import uvicorn  # noqa: PLC0415

    class Web(uvicorn.Server):
        """uvicorn without its own signal handlers: this module's receiver stops it."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Web


class EraGate:
    """Answers a sessionless (2026-era) request with -32022 and the versions served."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            version = _header(scope, b"mcp-protocol-version")
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                await _refuse_version(version, receive, send)
                return
        await self.app(scope, receive, send)


class SessionWatch:
    """Tells the notice desk when an HTTP session is used, and when it ends."""

    def __init__(self, app: ASGIApp, desk: NoticeDesk) -> None:
        self.app = app
        self.desk = desk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = _header(scope, b"mcp-session-id") if scope["type"] == "http" else None
        if session is None:
            await self.app(scope, receive, send)
            return
        key = f"http:{session[:64]}"
        self.desk.touch(key)
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            ended = scope["method"] == "DELETE" or status == 404
            if ended:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.desk.end, key)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


async def _refuse_version(version: str, receive: Receive, send: Send) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    request_id: Any = None
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError):
        request_id = orjson.loads(body).get("id")
    error = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": UNSUPPORTED_VERSION,
            "message": f"protocol version {version} is not served here: workunits claims "
            "notices per MCP session, which the initialize handshake opens",
            "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version},
        },
    }
    payload = orjson.dumps(error)
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def say(line: str) -> None:
    """A line for the operator, on stderr (never stdout: it may be the JSON-RPC wire)."""
    print(f"workunits mcp: {line}", file=sys.stderr, flush=True)
