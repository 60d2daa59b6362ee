"""``--connect``: agents share one fleet through a running ``workunits serve``."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.http.server import Served
from tests.mcp_server.harness import call, fail, read_all, stdio

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("through", ["state_dir", "url"])
def test_attached_to_a_running_serve(tmp_path: Path, through: str) -> None:
    served = Served(tmp_path / "fleet")
    try:
        options: tuple[str, ...]
        if through == "url":
            options = (
                "--connect",
                served.url,
                "--token-file",
                str(served.state_dir / "http.token"),
            )
        else:
            options = ("--connect", str(served.state_dir))

        async def scenario() -> None:
            async with stdio(tmp_path / "unused", "--sandbox", "none", *options, cwd=tmp_path) as c:
                unit = (await call(c, "start_shell", command="echo one; sleep 0.2; echo two"))["id"]
                done = await call(c, "wait_for", ids=[unit], timeout=30)
                while done["running"]:
                    done = await call(c, "wait_for", ids=[unit], timeout=30)
                assert done["ended"][0]["status"] == "completed"
                assert await read_all(c, unit) == "one\ntwo\n"
                found = await call(c, "search_output", id=unit, pattern="tw")
                assert [m["offset"] for m in found["matches"]] == [4]
                taken = await call(c, "take_notices", wait=20)
                assert [n["id"] for n in taken["notices"]] == [unit]
                assert (await call(c, "take_notices"))["acknowledged"] == [unit]
                listed = await call(c, "list_units")
                assert unit in {u["id"] for u in listed["units"]}

        anyio.run(scenario)
    finally:
        served.stop()
    assert not (tmp_path / "unused").exists()  # no supervisor of its own


def test_attached_it_refuses_a_sandbox_its_client_cannot_carry(tmp_path: Path) -> None:
    served = Served(tmp_path / "fleet")
    try:

        async def scenario() -> None:
            options = ("--connect", str(served.state_dir))
            async with stdio(tmp_path / "unused", *options, cwd=tmp_path) as c:  # workspace
                refused = await fail(c, "start_shell", command="true")
                assert "cannot enforce sandbox workspace" in refused
                assert "--sandbox none" in refused

        anyio.run(scenario)
    finally:
        served.stop()
