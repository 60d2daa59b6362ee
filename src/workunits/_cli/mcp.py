"""``mcp``: a Model Context Protocol server, for agents that speak MCP to their tools.

On stdio by default (the agent launches ``workunits mcp`` as a tool server);
``--http HOST:PORT`` serves streamable HTTP behind the state dir's bearer
token instead, so several agents can share one fleet. It runs a supervisor
of its own on the state dir, or (``--connect``) works through a running
``workunits serve``. The server itself is ``workunits._mcp``.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from workunits._cli import user_code
from workunits._cli._app import cli, seconds_option, state_option, tls_options
from workunits._core.errors import SpecError


@cli.command("mcp")
@state_option
@click.option(
    "--connect",
    metavar="URL|STATE_DIR",
    default=None,
    help="Attach to a running `workunits serve` (its --http URL, or its state dir) instead "
    "of running a supervisor here: several agents then share one fleet.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The bearer token for --connect URL (the served state dir's http.token); with "
    "--http it also guards this server.",
)
@click.option(
    "--http",
    "http_bind",
    metavar="HOST:PORT",
    default=None,
    help="Serve streamable HTTP at /mcp instead of stdio (needs workunits[http]); a bare "
    "PORT binds 127.0.0.1, port 0 picks a free one. Clients send the state dir's "
    "http.token as Authorization: Bearer, as for `serve --http`.",
)
@tls_options
@click.option(
    "--sandbox",
    "sandbox_preset",
    type=click.Choice(["workspace", "read_only", "none"]),
    default="workspace",
    show_default=True,
    help="The sandbox units started through MCP run under: workspace (writes only in "
    "--workspace), read_only, or none. A model may ask only for a narrower one. Where "
    "the machine cannot enforce it, units are refused unless this is none.",
)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The directory units run in and may write to (default: the current directory).",
)
@click.option(
    "--allow-target",
    "targets",
    multiple=True,
    metavar="MODULE:FUNCTION",
    help="An importable agent a model may start with start_agent (repeatable); none by "
    "default: a model never runs arbitrary Python.",
)
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Import MODULE in this server's supervisor first (as `serve --import`).",
)
@click.option(
    "--max-running",
    type=int,
    default=16,
    show_default=True,
    help="Units this server started that may run at once.",
)
@click.option(
    "--max-output",
    type=int,
    default=32 << 10,
    show_default=True,
    help="Output bytes one tool call returns at most (cut with a note past it).",
)
@click.option(
    "--max-wait",
    type=float,
    default=30.0,
    show_default=True,
    callback=seconds_option(),
    metavar="SECONDS",
    help="The longest wait_for, wait_for_output or take_notices waits; keep it "
    "below your client's tool timeout.",
)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append one JSON line per tool call here instead of stderr.",
)
def mcp_command(  # noqa: PLR0917 - click passes every option by position
    state_dir: Path,
    connect: str | None,
    token_file: Path | None,
    http_bind: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    insecure: bool,
    sandbox_preset: str,
    workspace: Path | None,
    targets: tuple[str, ...],
    imports: tuple[str, ...],
    max_running: int,
    max_output: int,
    max_wait: float,
    log_file: Path | None,
) -> None:
    """Serve the fleet to MCP clients: start, read, wait for, collect and kill units as tools.

    Nothing but JSON-RPC goes to stdout; every tool call is logged on stderr
    (or --log-file) with the units it touched. It stops when the client
    closes stdin, or on SIGTERM/SIGINT/SIGHUP: resumable units of its own
    supervisor are handed to the next start (same ID), the others end killed.
    """
    try:
        from workunits import _mcp  # noqa: PLC0415 - the [mcp] extra, loaded only here
    except ModuleNotFoundError as missing:
        if missing.name != "mcp":
            raise
        raise SpecError(str(missing)) from None
    for target in targets:
        module, sep, name = target.partition(":")
        if not (module and sep and name):
            raise SpecError(f"--allow-target takes MODULE:FUNCTION, got {target!r}")
    if (tls_cert is None) != (tls_key is None):
        raise SpecError("--tls-cert and --tls-key go together")
    http = None
    if http_bind is not None:
        from workunits._http.server import is_loopback, parse_bind  # noqa: PLC0415

        http = parse_bind(http_bind)
        if not is_loopback(http[0]) and tls_cert is None and not insecure:
            raise SpecError(
                f"refusing to serve MCP over HTTP on {http[0]}, which is not a loopback "
                "address, without TLS: give --tls-cert and --tls-key, or --insecure"
            )
    # On stdio, stdout is the wire from here on: --import's modules print to stderr.
    wire = _mcp.claim_stdio() if http_bind is None else None
    if imports and connect is None:
        kinds = user_code.import_all(imports)
        options = {"preload": imports, "kinds": kinds}
    elif imports:
        raise SpecError("--import is for this server's own supervisor: not with --connect")
    else:
        options = {}
    token = None if token_file is None else token_file.read_text().strip()
    settings = _mcp.Settings(
        state_dir=state_dir,
        workspace=workspace if workspace is not None else Path(os.getcwd()),
        sandbox=sandbox_preset,
        connect=connect,
        token=token,
        http=http,
        tls=None if tls_cert is None or tls_key is None else (tls_cert, tls_key),
        targets=frozenset(targets),
        limits=_mcp.Limits(max_running=max_running, max_output=max_output, max_wait=max_wait),
        log_file=None if log_file is None else str(log_file),
        supervisor_options=options,
    )
    _mcp.run(settings, wire)
