"""The MCP server: tools and resources on the SDK's low-level ``Server``.

One :class:`McpServer` per process, on stdio (one client: the process that
launched it) or streamable HTTP (many sessions; see ``http.py``). It runs in
one event loop (anyio on asyncio); the fleet's blocking calls go to worker
threads. Tool calls are logged (``calllog``); resources are watched by one
task that tells subscribers when a unit's output grows or its status moves.
"""

from __future__ import annotations

import logging
import re
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import orjson
from mcp.server import Server, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

import workunits
from workunits._core.errors import WorkunitsError
from workunits._core.status import Status, is_terminal
from workunits._mcp import output
from workunits._mcp.calllog import CallLog
from workunits._mcp.fleet import Fleet
from workunits._mcp.schemas import TOOLS
from workunits._mcp.tools import ToolFailure, Tools, summary

log = logging.getLogger("workunits.mcp")

WATCH_EVERY = 0.25  # seconds between looks at subscribed units
RESOURCE_RE = re.compile(r"workunits://units/([a-z][0-9a-z]{8})/(output|transcript)")
LISTING = "workunits://units"
STDIO_SESSION = "stdio"

INSTRUCTIONS = (
    "workunits runs background work: start_shell or start_agent answer at once with a unit "
    "ID; read_output reads its output by offset while it runs; wait_for waits (bounded) for "
    "ends; take_notices collects each end exactly once; kill stops a unit. Units are "
    "durable: they outlive this conversation's tool calls, and their IDs stay valid."
)


@dataclass
class _Watched:
    status: Status | None = None
    offset: int = 0


class McpServer:
    """The tools, resources and subscriptions over one fleet."""

    def __init__(self, tools: Tools, calls: CallLog) -> None:
        self.tools = tools
        self.calls = calls
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        # Subscribers of the handshake era, by URI; and how many listen streams of
        # the 2026 era want each URI. Both touched only on the event loop.
        self._legacy: dict[str, list[ServerSession]] = {}
        self._modern: Counter[str] = Counter()
        self._watched: dict[str, _Watched] = {}
        self._running: frozenset[str] = frozenset()
        self.lowlevel: Server[Any] = Server(
            "workunits",
            version=workunits.__version__,
            title="workunits: durable background work",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._subscriptions_listen,
        )

    # -- tools ---------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=name, description=description, input_schema=schema)
                for name, (description, schema) in TOOLS.items()
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        started = time.monotonic()
        session = session_of(ctx)
        name = params.name
        args = dict(params.arguments or {})
        try:
            answer = await self.tools.call(name, args, session)
        except ToolFailure as failure:
            self.calls.write(
                session=session,
                tool=name,
                units=failure.units or _ids_in(args),
                ok=False,
                started=started,
                error=str(failure),
            )
            return _error(str(failure))
        except Exception as exc:
            log.exception("tool %s failed", name)
            self.calls.write(
                session=session,
                tool=name,
                units=_ids_in(args),
                ok=False,
                started=started,
                error=f"{type(exc).__name__}: {exc}",
            )
            return _error(
                f"internal error in {name} ({type(exc).__name__}: {exc}); the server's log "
                "has the traceback"
            )
        self.calls.write(session=session, tool=name, units=answer.units, ok=True, started=started)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.text)],
            structured_content=answer.data,
        )

    # -- resources -----------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        running = await anyio.to_thread.run_sync(self.tools.fleet.list, "running")
        resources = [
            types.Resource(
                name="units",
                uri=LISTING,
                description="The running units, as JSON (list_units for the others).",
                mime_type="application/json",
            )
        ]
        for record in running:
            resources.append(
                types.Resource(
                    name=f"{record.id} output",
                    uri=f"workunits://units/{record.id}/output",
                    description=f"{record.kind} {record.description[:200]}",
                    mime_type="text/plain",
                )
            )
        return types.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        limit = self.tools.limits.max_output
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="unit output",
                    uri_template="workunits://units/{id}/output",
                    description=f"A unit's output (its last {limit} bytes; read_output reads "
                    "it all by offset). Subscribe to hear when it grows or the unit ends.",
                    mime_type="text/plain",
                ),
                types.ResourceTemplate(
                    name="agent transcript",
                    uri_template="workunits://units/{id}/transcript",
                    description="An agent's JSONL transcript (its last bytes, as output).",
                    mime_type="application/jsonl",
                ),
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == LISTING:
            running = await anyio.to_thread.run_sync(self.tools.fleet.list, "running")
            text = orjson.dumps([summary(r) for r in running]).decode()
            contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
            return types.ReadResourceResult(contents=[contents])
        work_id, part = _parse(uri)
        text = await anyio.to_thread.run_sync(self._tail, work_id, part)
        mime = "application/jsonl" if part == "transcript" else "text/plain"
        contents = types.TextResourceContents(uri=uri, mime_type=mime, text=text)
        return types.ReadResourceResult(contents=[contents])

    def _tail(self, work_id: str, part: str) -> str:
        """The last ``max_output`` bytes of the unit's output, with a note if cut."""
        fleet, limit = self.tools.fleet, self.tools.limits.max_output
        try:
            record = fleet.get(work_id)
            if part == "transcript" and record.kind not in ("agent", "workflow", "dream"):
                raise _resource_error(f"{work_id} is a {record.kind}: only agents have transcripts")
            size = record.output_bytes
            if not is_terminal(record.status):
                size = _size_now(fleet, work_id, record.output_offset)
            got = output.read(fleet, work_id, max(0, size - limit), limit)
        except WorkunitsError as exc:
            raise _resource_error(str(exc)) from None
        if got.offset > 0:
            return (
                f"[the first {got.offset} bytes are left out: read_output(id='{work_id}', "
                f"offset=0) reads them]\n{got.text}"
            )
        return got.text

    async def _subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        if uri != LISTING:
            _parse(uri)
        self._legacy.setdefault(uri, []).append(ctx.session)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        sessions = self._legacy.get(uri, [])
        # Sessions are per request: a subscriber is known by its connection's stream.
        sessions[:] = [s for s in sessions if not _same_peer(s, ctx.session)]
        if not sessions:
            self._legacy.pop(uri, None)
        return types.EmptyResult()

    async def _subscriptions_listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        uris = list(params.notifications.resource_subscriptions or ())
        self._modern.update(uris)
        try:
            return await self._listen(ctx, params)
        finally:
            self._modern.subtract(uris)
            self._modern += Counter()  # drop the URIs nobody listens to any more

    # -- watching ------------------------------------------------------------------

    async def watch(self) -> None:
        """Tell subscribers of each watched unit when it writes or its status moves.

        Runs on the event loop until cancelled; each look is a worker thread's.
        """
        while True:
            await anyio.sleep(WATCH_EVERY)
            try:
                await self._look()
            except Exception:  # noqa: BLE001 - a watcher that dies tells nobody anything again
                log.warning("watching subscribed units failed:\n%s", traceback.format_exc())

    async def _look(self) -> None:
        uris = set(self._legacy) | set(self._modern)
        changed: list[str] = []
        for uri in uris - {LISTING}:
            work_id, _part = _parse(uri)
            seen = self._watched.setdefault(uri, _Watched())
            if await anyio.to_thread.run_sync(self._moved, work_id, seen):
                changed.append(uri)
        for gone in set(self._watched) - uris:
            del self._watched[gone]
        if LISTING in uris or self._modern:
            running = await anyio.to_thread.run_sync(self.tools.fleet.list, "running")
            now = frozenset(r.id for r in running)
            if now != self._running:
                self._running = now
                changed.append(LISTING)
                await self.bus.publish(ResourcesListChanged())
        for uri in changed:
            await self.bus.publish(ResourceUpdated(uri=uri))
            for session in list(self._legacy.get(uri, ())):
                await session.send_resource_updated(uri)

    def _moved(self, work_id: str, seen: _Watched) -> bool:
        """Whether the unit wrote or changed status since the last look (blocking)."""
        fleet = self.tools.fleet
        try:
            record = fleet.get(work_id)
            chunk = fleet.read(work_id, seen.offset, 1 << 20)
        except WorkunitsError:
            return False
        moved = record.status != seen.status or chunk.next_offset != seen.offset
        seen.status, seen.offset = record.status, chunk.next_offset
        return moved

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The watcher, for as long as the transport serves."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.watch)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()


def session_of(ctx: ServerRequestContext[Any]) -> str:
    """The MCP session a request belongs to: its HTTP session, or the stdio client."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is not None:
        session_id = headers.get("mcp-session-id")
        if session_id:
            return f"http:{session_id[:64]}"
    return STDIO_SESSION


def _same_peer(a: ServerSession, b: ServerSession) -> bool:
    return a.client_params is b.client_params


def _size_now(fleet: Fleet, work_id: str, hint: int) -> int:
    """How many bytes a running unit has written: read on from ``hint`` to the end."""
    offset = hint
    while True:
        chunk = fleet.read(work_id, offset, 4 << 20)
        if not chunk.data:
            return chunk.next_offset
        offset = chunk.next_offset


def _parse(uri: str) -> tuple[str, str]:
    match = RESOURCE_RE.fullmatch(uri)
    if match is None:
        raise _resource_error(
            f"no resource {uri!r}: the resources are {LISTING} and "
            "workunits://units/{id}/output (or /transcript)"
        )
    return match[1], match[2]


def _resource_error(message: str) -> Exception:
    from mcp.shared.exceptions import MCPError  # noqa: PLC0415 - only on this path

    return MCPError(code=types.INVALID_PARAMS, message=message)


def _error(sentence: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=sentence)], is_error=True
    )


def _ids_in(args: dict[str, Any]) -> list[str]:
    found = [args["id"]] if isinstance(args.get("id"), str) else []
    ids = args.get("ids")
    if isinstance(ids, list):
        found.extend(i for i in ids if isinstance(i, str))
    return found
