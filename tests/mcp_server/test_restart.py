"""The server restarts mid-unit: a checkpointing agent resumes under the same ID."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.mcp_server.harness import call, read_all, stdio

pytestmark = pytest.mark.timeout(120)

OPTIONS = ("--sandbox", "none", "--allow-target", "tests.mcp_server.jobs:count_to")


def test_a_checkpointing_agent_resumes_under_the_same_id_after_a_restart(tmp_path: Path) -> None:
    state, gate = tmp_path / "s", tmp_path / "gate"

    async def before() -> str:
        async with stdio(state, *OPTIONS, cwd=tmp_path) as c:
            work_id = str(
                (
                    await call(
                        c,
                        "start_agent",
                        target="tests.mcp_server.jobs:count_to",
                        kwargs={"n": 3, "gate": str(gate)},
                    )
                )["id"]
            )
            heard = await call(c, "wait_for_output", id=work_id, pattern="step 1", timeout=30)
            assert heard["matched"]
            return work_id  # the client goes: the server stops, handing the agent over

    async def after(work_id: str) -> None:
        async with stdio(state, *OPTIONS, cwd=tmp_path) as c:
            gate.touch()
            done = await call(c, "wait_for", ids=[work_id], timeout=30)
            while done["running"]:
                done = await call(c, "wait_for", ids=[work_id], timeout=30)
            unit = done["ended"][0]
            assert unit["id"] == work_id
            assert unit["status"] == "completed"
            assert unit["attempt"] == 2
            transcript = await read_all(c, work_id)
            assert "attempt 2 starts at 1" in transcript  # from its checkpoint
            assert transcript.count("step 1") == 1  # not done twice
            assert "step 3" in transcript
            notice = await call(c, "take_notices", wait=10)
            assert [n["id"] for n in notice["notices"]] == [work_id]

    work_id = anyio.run(before)
    anyio.run(after, work_id)
