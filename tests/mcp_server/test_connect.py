"""``--connect``: agents share one fleet through a running ``workunits serve``."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import workunits as wu
from tests.http.server import Served
from tests.mcp_server.harness import call, read_all, stdio

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


@pytest.mark.parametrize("through", ["state_dir", "url"])
def test_attached_its_units_carry_the_servers_sandbox(tmp_path: Path, through: str) -> None:
    """Through --connect the client writes the policy with the unit; the supervisor that
    starts it keeps it and enforces it, as for a server with a supervisor of its own."""
    served = Served(tmp_path / "fleet")
    work = tmp_path / "work"
    work.mkdir()
    try:
        options: tuple[str, ...] = ("--connect", str(served.state_dir))
        if through == "url":
            token = str(served.state_dir / "http.token")
            options = ("--connect", served.url, "--token-file", token)

        async def scenario() -> str:
            async with stdio(tmp_path / "unused", *options, cwd=work) as c:  # workspace
                unit = await call(c, "start_shell", command="echo confined > here")
                assert unit["sandbox"] == f"workspace {work}"
                done = await call(c, "wait_for", ids=[unit["id"]], timeout=30)
                while done["running"]:
                    done = await call(c, "wait_for", ids=[unit["id"]], timeout=30)
                assert done["ended"][0]["status"] == "completed"
                return str(unit["id"])

        unit_id = anyio.run(scenario)
        with wu.connect(served.state_dir) as client:
            assert client.get(unit_id).sandbox == wu.Sandbox.workspace(work)
        assert (work / "here").read_text() == "confined\n"
    finally:
        served.stop()
