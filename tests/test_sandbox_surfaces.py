"""``sandbox=`` on every surface: the ledger client, the HTTP client and API, the CLI, and
every batch (``submit_many``, ``map``, the executors, a unit's children).

A policy submitted through the ledger (a client's, the CLI's, an HTTP body's) is
decided by the supervisor that adopts the unit, as a submit of its own is, and
enforced there: a command under ``Sandbox.workspace`` writes inside it and not
beside it, whichever way it came.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import workunits as wu
from tests.http.server import Served
from workunits._cli import cli

from .sandbox_support import landlock, need

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace, and a directory beside it the unit must not write into."""
    work = tmp_path / "ws"
    work.mkdir()
    (tmp_path / "beside").mkdir()
    for path in (tmp_path, work, tmp_path / "beside"):
        path.chmod(0o777)  # another user's run of the suite too
    return work


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[wu.Supervisor]:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        yield sup


def writes_in_and_beside(ws: Path) -> list[str]:
    """A command that writes into ``ws`` and then beside it; it fails if the second is refused."""
    beside = ws.parent / "beside" / "x"
    return ["/bin/sh", "-c", f"echo in > {ws}/in && echo out > {beside}"]


def confined_to(ws: Path, record: wu.WorkRecord) -> None:
    """The unit ran under ``Sandbox.workspace(ws)``: it wrote inside, not beside."""
    assert record.sandbox == wu.Sandbox.workspace(ws)
    assert (ws / "in").read_text() == "in\n"
    assert not (ws.parent / "beside" / "x").exists()
    assert record.status is wu.Status.FAILED  # its write beside the workspace was refused


def test_a_ledger_client_submits_a_policy_its_supervisor_enforces(
    sup: wu.Supervisor, ws: Path
) -> None:
    need(landlock(1))
    with wu.connect(sup.state_dir) as client:
        handle = client.shell(writes_in_and_beside(ws), sandbox=wu.Sandbox.workspace(ws))
        assert client.row(handle.id).sandbox == wu.Sandbox.workspace(ws)  # kept with the unit
        record = client.wait(handle.id, timeout=WAIT)
    confined_to(ws, sup.get(record.id))


def test_a_client_policy_the_machine_cannot_enforce_fails_the_unit_saying_why(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    missing = tmp_path / "not-there"
    with wu.connect(sup.state_dir) as client:
        handle = client.shell(["true"], sandbox=wu.Sandbox.workspace(missing))
        record = client.wait(handle.id, timeout=WAIT)
    assert record.status is wu.Status.FAILED
    assert "could not start" in (record.error or "")
    assert "does not exist" in (record.error or "")


def test_a_client_refuses_what_is_not_a_policy(sup: wu.Supervisor) -> None:
    with wu.connect(sup.state_dir) as client, pytest.raises(wu.SpecError, match=r"wu\.Sandbox"):
        client.shell(["true"], sandbox="read-only")  # type: ignore[arg-type]


def test_the_http_client_and_api_carry_a_policy(tmp_path: Path, ws: Path) -> None:
    need(landlock(1))
    served = Served(tmp_path / "served")
    try:
        with wu.connect(served.url, token=served.token) as client:
            handle = client.shell(writes_in_and_beside(ws), sandbox=wu.Sandbox.workspace(ws))
            client.wait(handle.id, timeout=WAIT)
            # The body as the API takes it, without the Python client.
            import httpx  # noqa: PLC0415 - the HTTP extra

            body = {"kind": "shell", "argv": ["true"], "sandbox": {"write": [], "network": False}}
            sent = httpx.post(f"{served.url}/v1/units", json=body, headers=served.auth)
            assert sent.status_code == 201, sent.text
            assert sent.json()["sandbox"]["policy"] == {"write": [], "network": False}
            bad = {"kind": "shell", "argv": ["true"], "sandbox": {"write": ["relative"]}}
            refused = httpx.post(f"{served.url}/v1/units", json=bad, headers=served.auth)
            assert refused.status_code == 422, refused.text
        with wu.connect(served.state_dir) as ledger:
            record = ledger.get(handle.id)
    finally:
        served.stop()
    confined_to(ws, record)


def test_the_cli_submits_a_policy(sup: wu.Supervisor, ws: Path) -> None:
    need(landlock(1))
    runner = CliRunner()
    state = str(sup.state_dir)
    argv = ["submit", "--state", state, "-q", "--sandbox", f"workspace={ws}", "--"]
    shown = runner.invoke(cli, [*argv, *writes_in_and_beside(ws)])
    assert shown.exit_code == 0, shown.output
    confined_to(ws, sup.wait(shown.stdout.strip(), timeout=WAIT))
    read_only = runner.invoke(cli, ["submit", "--state", state, "-q", "--sandbox", "read-only"])
    assert read_only.exit_code != 0  # no command: refused before anything is written
    policy = '{"write": [], "network": false}'
    given = runner.invoke(cli, ["submit", "--state", state, "-q", "--sandbox", policy, "true"])
    assert given.exit_code == 0, given.output
    assert sup.wait(given.stdout.strip(), timeout=WAIT).sandbox == wu.Sandbox.read_only()


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("readonly", "read-only, workspace, workspace=DIR, none or a JSON policy"),
        ("workspace=/no/such/dir", "no directory"),
        ('{"write": 3}', "list of paths"),
        ("{not json", "not valid JSON"),
    ],
)
def test_the_cli_says_what_a_bad_sandbox_flag_lacks(tmp_path: Path, flag: str, says: str) -> None:
    shown = CliRunner().invoke(
        cli, ["submit", "--state", str(tmp_path / "state"), "--sandbox", flag, "true"]
    )
    assert shown.exit_code != 0
    assert says in shown.output


def square(x: int) -> int:
    return x * x


def test_every_batch_carries_its_policy(sup: wu.Supervisor, ws: Path) -> None:
    policy = wu.Sandbox.workspace(ws)
    handles = sup.submit_many([wu.AgentCall(square, (2,))], sandbox=policy)
    assert sup.get(handles[0].id).sandbox == policy
    assert list(sup.map(square, [3], timeout=WAIT, sandbox=policy)) == [9]
    with sup.executor(sandbox=policy) as executor:
        future = executor.submit(square, 4)
        assert future.result(timeout=WAIT) == 16
    assert sup.get(future.id).sandbox == policy
    with sup.pool(sandbox=policy) as pool:
        pooled = pool.agent(square, 5)
    assert sup.get(pooled.id).sandbox == policy
    with wu.connect(sup.state_dir) as client:
        (queued,) = client.submit_many([wu.AgentCall(f"{__name__}:square", (6,))], sandbox=policy)
        assert client.row(queued.id).sandbox == policy
        assert client.result(queued.id, timeout=WAIT) == 36


def children_under() -> list[object]:
    ctx = wu.current()
    policy = wu.Sandbox.read_only()
    (child,) = ctx.submit_many([wu.AgentCall(square, (7,))], sandbox=policy)
    mapped = list(ctx.map(square, [8], timeout=WAIT, sandbox=policy))
    return [ctx.get(child).sandbox, mapped]


def test_a_units_batch_of_children_carries_its_policy(sup: wu.Supervisor) -> None:
    got = sup.result(sup.agent(children_under).id, timeout=WAIT)
    assert got == [wu.Sandbox.read_only(), [64]]


def test_the_executor_refuses_what_is_not_a_policy(sup: wu.Supervisor) -> None:
    with pytest.raises(wu.SpecError, match=r"wu\.Sandbox"):
        sup.executor(sandbox=object())  # type: ignore[arg-type]
