"""Real ``workunits mcp`` processes driven by the MCP SDK's own client, over stdio or HTTP."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0


def server_env() -> dict[str, str]:
    """The test's environment, with the repository importable (``tests.mcp_server.jobs``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def command(state: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "workunits", "mcp", "--state", str(state), *options]


@asynccontextmanager
async def stdio(state: Path, *options: str, cwd: Path) -> AsyncIterator[Client]:
    """An SDK client of a ``workunits mcp`` it launched over stdio, as an agent does."""
    argv = command(state, *options)
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(cwd), env=server_env())
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


class HttpServer:
    """``workunits mcp --http 127.0.0.1:0`` in a process of its own; ``url`` once it serves."""

    def __init__(self, state: Path, *options: str, cwd: Path) -> None:
        self.state = state
        self.proc = subprocess.Popen(
            [*command(state, *options), "--http", "127.0.0.1:0"],
            cwd=cwd,
            env=server_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr: list[str] = []
        self._out = ""
        found = threading.Event()
        self.url = ""

        def read_stderr() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.stderr.append(line)
                match = re.search(r"(https?://\S+/mcp)", line)
                if match and not self.url:
                    self.url = match[1]
                    found.set()
            found.set()

        self._reader = threading.Thread(target=read_stderr, daemon=True)
        self._reader.start()
        if not found.wait(START_TIMEOUT) or not self.url:
            self.stop()
            raise AssertionError("workunits mcp --http did not start:\n" + "".join(self.stderr))
        self.token = (state / "http.token").read_text().strip()

    @asynccontextmanager
    async def client(self, token: str | None = None) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {self.token if token is None else token}"}
        http = httpx2.AsyncClient(headers=headers, timeout=60)
        async with http, Client(streamable_http_client(self.url, http_client=http)) as client:
            yield client

    def stop(self) -> str:
        """SIGTERM, then the process's stdout (which must be empty) and stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(30)
        self._reader.join(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        assert self.proc.stdout is not None
        if self.proc.stdout.closed:
            return self._out
        self._out = self.proc.stdout.read()
        self.proc.stdout.close()
        return self._out


@contextmanager
def http_server(state: Path, *options: str, cwd: Path) -> Iterator[HttpServer]:
    server = HttpServer(state, *options, cwd=cwd)
    try:
        yield server
    finally:
        server.stop()


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """The tool's structured answer; fails the test if the tool answered an error."""
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, f"{tool} failed: {text}"
    assert result.structured_content is not None
    return dict(result.structured_content)


async def fail(client: Client, tool: str, **arguments: Any) -> str:
    """The one sentence of a tool error; fails the test if the tool succeeded."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} succeeded: {result.structured_content}"
    return "".join(getattr(block, "text", "") for block in result.content)


async def read_all(client: Client, work_id: str, max_bytes: int | None = None) -> str:
    """read_output from offset 0, by next_offset, until the unit's output ends."""
    text, offset = [], 0
    while True:
        args: dict[str, Any] = {"id": work_id, "offset": offset}
        if max_bytes is not None:
            args["max_bytes"] = max_bytes
        got = await call(client, "read_output", **args)
        assert got["offset"] == offset, got  # nothing skipped
        text.append(got["text"])
        offset = got["next_offset"]
        if not got["more"]:
            return "".join(text)


@contextmanager
def quiet_deprecations() -> Iterator[None]:
    """The 2025-era subscribe calls the SDK marks deprecated (they are what HTTP speaks here)."""
    from mcp.shared.exceptions import MCPDeprecationWarning  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield
