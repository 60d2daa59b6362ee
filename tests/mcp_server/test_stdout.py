"""Nothing but JSON-RPC on stdout: what the server, the zygote or a unit writes goes elsewhere."""

from __future__ import annotations

import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.mcp_server.harness import command, server_env

pytestmark = pytest.mark.timeout(120)


class Raw:
    """A JSON-RPC peer on a ``workunits mcp`` process's stdin and stdout, line by line."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=server_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stdout: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line)
            self.lines.put(line)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        self.proc.stdin.flush()

    def ask(self, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            reply = orjson.loads(self.lines.get(timeout=60))
            if reply.get("id") == request_id:
                return dict(reply)

    def close(self) -> bytes:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)
        self._reader.join(10)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return err


def test_only_json_rpc_reaches_stdout(tmp_path: Path) -> None:
    argv = command(
        tmp_path / "s",
        "--sandbox",
        "none",
        "--import",
        "tests.mcp_server.noisy",
        "--allow-target",
        "tests.mcp_server.noisy:shout",
    )
    raw = Raw(argv, tmp_path)
    hello = {"name": "raw", "version": "0"}
    init = raw.ask(
        1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": hello}
    )
    assert init["result"]["serverInfo"]["name"] == "workunits"
    raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    shell = raw.ask(
        2,
        "tools/call",
        {
            "name": "start_shell",
            "arguments": {
                "command": "echo NOISE; echo NOISE to stderr >&2; echo NOISE > /dev/stdout",
            },
        },
    )
    agent = raw.ask(
        3,
        "tools/call",
        {
            "name": "start_agent",
            "arguments": {
                "target": "tests.mcp_server.noisy:shout",
            },
        },
    )
    ids = [shell["result"]["structuredContent"]["id"], agent["result"]["structuredContent"]["id"]]
    running = ids
    for request_id in range(4, 40):
        if not running:
            break
        waited = raw.ask(
            request_id, "tools/call", {"name": "wait_for", "arguments": {"ids": running}}
        )
        running = waited["result"]["structuredContent"]["running"]
    assert not running
    err = raw.close()
    assert raw.proc.returncode == 0
    assert raw.stdout, "no answers at all"
    for line in raw.stdout:
        message = orjson.loads(line)  # every line is one JSON-RPC message...
        assert message["jsonrpc"] == "2.0"
    wire = b"".join(raw.stdout)
    for noise in (b"NOISE at import", b"NOISE on fd 1", b"NOISE from an agent"):
        assert noise not in wire  # ... and none of the noise
    assert b"NOISE at import" in err  # the server's own went to stderr
