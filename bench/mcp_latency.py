"""Issue 40: start_shell -> first read_output bytes through ``workunits mcp`` on stdio.

    python bench/mcp_latency.py [N]

The MCP SDK's own client launches ``workunits mcp`` (its own supervisor, a
fresh state dir, ``--sandbox none``), then N times: ``start_shell("echo hi;
sleep 5")``, ``read_output`` from offset 0 until it returns bytes, ``kill``.
Beside it, in the same run, its floor: the same steps in Python on a
``Supervisor`` (``sup.shell`` then ``sup.read_output(id, offset=0)`` until
bytes), with no MCP, JSON-RPC or pipe in between. Medians and their ratio.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

import workunits as wu

COMMAND = "echo hi; sleep 5"


async def through_mcp(state: Path, n: int) -> list[float]:
    argv = [sys.executable, "-m", "workunits", "mcp", "--state", str(state), "--sandbox", "none"]
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(state.parent))
    samples: list[float] = []
    async with Client(params) as client:
        for _ in range(n):
            began = time.perf_counter()
            started = await client.call_tool("start_shell", {"command": COMMAND})
            assert started.structured_content is not None
            unit = started.structured_content["id"]
            while True:
                read = await client.call_tool("read_output", {"id": unit, "offset": 0})
                assert read.structured_content is not None
                if read.structured_content["text"]:
                    break
            samples.append(time.perf_counter() - began)
            await client.call_tool("kill", {"id": unit})
    return samples


def floor(state: Path, n: int) -> list[float]:
    samples: list[float] = []
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        for _ in range(n):
            began = time.perf_counter()
            handle = sup.shell(COMMAND, keep_output=True)
            while not sup.read_output(handle.id, offset=0).data:
                pass
            samples.append(time.perf_counter() - began)
            sup.kill(handle.id)
            sup.wait(handle.id, timeout=10)
    return samples


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    with tempfile.TemporaryDirectory() as scratch:
        mcp = anyio.run(through_mcp, Path(scratch) / "mcp", n)
        direct = floor(Path(scratch) / "direct", n)
    ms_mcp = statistics.median(mcp) * 1000
    ms_direct = statistics.median(direct) * 1000
    print(f"start_shell -> first read_output bytes, median of {n}")
    print(f"  through workunits mcp (stdio):  {ms_mcp:.2f} ms")
    print(f"  floor (Supervisor in Python):   {ms_direct:.2f} ms")
    print(f"  ratio: {ms_mcp / ms_direct:.2f}x")


if __name__ == "__main__":
    main()
