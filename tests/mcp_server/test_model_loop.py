"""A scripted model loop: a fixed sequence of tool calls standing in for an LLM.

The task is a small coding chore: build the project, read the build's output,
run the tests, notice that one of them hangs, kill it, and collect every end
exactly once. Run with ``-s`` to see the transcript (tool call, then answer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.mcp_server.harness import stdio

pytestmark = pytest.mark.timeout(120)

BUILD = """\
for f in parse.c eval.c main.c; do echo "cc -c $f"; done
echo "ld -o calc parse.o eval.o main.o"
echo "build ok"
"""
FAST_TEST = "echo 'test_parse ... ok'; echo 'test_eval ... ok'; echo '2 passed'\n"
HUNG_TEST = "echo 'test_repl ... waiting for input'; exec sleep 600\n"


class Model:
    """Calls tools and keeps the transcript a person would read."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.transcript: list[str] = []

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args)
        text = "".join(getattr(block, "text", "") for block in result.content)
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
        self.transcript.append(f"> {tool}({shown})")
        self.transcript.extend(f"  {line}" for line in text.splitlines()[:8])
        assert not result.is_error, text
        assert result.structured_content is not None
        return dict(result.structured_content)


def test_a_model_builds_runs_tests_kills_a_hung_one_and_collects_the_ends(tmp_path: Path) -> None:
    (tmp_path / "build.sh").write_text(BUILD)
    (tmp_path / "test_fast.sh").write_text(FAST_TEST)
    (tmp_path / "test_repl.sh").write_text(HUNG_TEST)

    async def loop() -> list[str]:
        async with stdio(tmp_path / "state", "--sandbox", "none", cwd=tmp_path) as client:
            model = Model(client)
            build = (await model("start_shell", command="sh build.sh", description="build"))["id"]
            assert (await model("wait_for", ids=[build], timeout=20))["ended"]
            output, offset, more = "", 0, True
            while more:
                got = await model("read_output", id=build, offset=offset)
                output, offset, more = output + got["text"], got["next_offset"], got["more"]
            assert output.endswith("build ok\n")
            fast = await model("start_shell", command="sh test_fast.sh", description="tests")
            hung = await model("start_shell", command="sh test_repl.sh", description="repl test")
            waited = await model("wait_for", ids=[fast["id"], hung["id"]], timeout=20)
            while fast["id"] in waited["running"]:
                waited = await model("wait_for", ids=[fast["id"], hung["id"]], timeout=20)
            assert waited["running"] == [hung["id"]]
            stuck = await model("wait_for_output", id=hung["id"], pattern="waiting for input")
            assert stuck["matched"]
            killed = await model("kill", id=hung["id"])
            assert killed["changed"]
            assert killed["status"] == "killed"
            ends: dict[str, dict[str, Any]] = {}
            while len(ends) < 3:
                taken = await model("take_notices", wait=10)
                ends.update((n["id"], n) for n in taken["notices"])
            assert (await model("take_notices"))["notices"] == []  # each end exactly once
            assert ends[build]["status"] == "completed"
            assert ends[build]["exit_code"] == 0
            assert ends[fast["id"]]["output_tail"].endswith("2 passed\n")
            assert ends[hung["id"]]["status"] == "killed"
            return model.transcript

    transcript = anyio.run(loop)
    print("\n".join(transcript))
