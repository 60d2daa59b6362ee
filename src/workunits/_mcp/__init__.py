"""``workunits mcp``: a Model Context Protocol server over a fleet of work units.

Any MCP client's model (Claude Code and Desktop, Codex, Cursor, the OpenAI
Agents SDK, ...) starts shell commands and allowed agents in the background,
reads their output by offset, waits for and collects their ends exactly once,
and kills them by ID -- with the ledger's durability, the kernel sandbox and
one notice per unit. Needs the ``workunits[mcp]`` extra (the official SDK,
``mcp``); ``import workunits`` never imports it.

Modules: ``fleet`` (a supervisor of its own, or a client of a running one),
``schemas`` and ``tools`` (what the model sees and what each tool does),
``output`` (offsets, cuts, regex scans), ``notices`` (claims per session),
``sandbox``, ``limits``, ``calllog``, ``server`` (tools and resources on the
SDK's low-level server) and ``transports`` (stdio, streamable HTTP, stopping).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import mcp  # noqa: F401 - only to say which extra is missing
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(
        "workunits mcp needs the MCP SDK: pip install 'workunits[mcp]'", name="mcp"
    ) from missing

import anyio

from workunits._mcp import sandbox
from workunits._mcp.calllog import CallLog
from workunits._mcp.fleet import Fleet, attach, own
from workunits._mcp.limits import Limits
from workunits._mcp.notices import NoticeDesk
from workunits._mcp.server import McpServer
from workunits._mcp.tools import Tools
from workunits._mcp.transports import claim_stdio, say, serve_http, serve_stdio

__all__ = ["Limits", "Settings", "claim_stdio", "run"]

DEFAULT_IDLE = 30 * 60.0  # seconds an HTTP session may stay silent before it ends


@dataclass(frozen=True)
class Settings:
    """What ``workunits mcp``'s options say (see ``_cli/mcp.py`` for each)."""

    state_dir: Path
    workspace: Path
    sandbox: str = "workspace"
    connect: str | None = None
    token: str | None = None
    http: tuple[str, int] | None = None
    tls: tuple[str, str] | None = None
    targets: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=Limits)
    log_file: str | None = None
    idle: float = DEFAULT_IDLE
    supervisor_options: dict[str, Any] = field(default_factory=dict)


def _fleet(settings: Settings) -> Fleet:
    if settings.connect is not None:
        return attach(settings.connect, token=settings.token)
    return own(
        str(settings.state_dir), install_signal_handlers=False, **settings.supervisor_options
    )


def _build(settings: Settings, policy: sandbox.Policy) -> tuple[McpServer, NoticeDesk]:
    fleet = _fleet(settings)
    try:
        desk = NoticeDesk(fleet.notices())
        tools = Tools(
            fleet=fleet,
            desk=desk,
            limits=settings.limits,
            policy=policy,
            targets=settings.targets,
            workspace=settings.workspace.resolve(),
        )
        server = McpServer(tools, CallLog(settings.log_file))
    except BaseException:
        fleet.close(deploy=True)
        raise
    say(
        f"serving {fleet.where} (sandbox {policy.describe()}; at most "
        f"{settings.limits.max_running} running units, {settings.limits.max_output} output "
        f"bytes per call, {settings.limits.max_wait:g} s per wait)"
    )
    return server, desk


def run(settings: Settings, wire: tuple[int, int] | None = None) -> None:
    """Serve until the client goes away (stdio: on ``wire``, from ``claim_stdio``) or a
    stop signal comes. Blocks."""
    policy = sandbox.operator_policy(settings.sandbox, settings.workspace)
    if settings.http is None:
        if wire is None:
            wire = claim_stdio()
        server, desk = _build(settings, policy)
        anyio.run(serve_stdio, wire, server, desk)
        return
    host, port = settings.http
    server, desk = _build(settings, policy)  # creates the state dir: the token's home
    token = settings.token
    if token is None:
        from workunits._http.security import load_or_create_token  # noqa: PLC0415

        where = settings.connect if settings.connect is not None else settings.state_dir
        token = load_or_create_token(Path(where))
    anyio.run(
        lambda: serve_http(
            server,
            desk,
            host=host,
            port=port,
            token=token,
            idle=settings.idle,
            announce=lambda url: say(f"streamable HTTP at {url} (Authorization: Bearer <token>)"),
            tls=settings.tls,
        )
    )
