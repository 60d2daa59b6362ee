"""Sandbox policies per unit (``wu.Sandbox``): filesystem, network, presets, children.

Each escape runs as a shell unit and as an agent: writing outside the allowed
roots directly, by symlink, hard link, rename and ``/proc/self/root``;
rewriting ``.git/config`` under ``Sandbox.workspace``; opening TCP, UDP and
io_uring sockets under ``network=False``; a port not in the list. A child may
only narrow its parent's policy, and the ledger keeps each unit's.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import workunits as wu
from workunits._cli import cli
from workunits._ray.actor import RemoteSpec

from .sandbox_support import (
    ESCAPED,
    HOWS,
    WAIT,
    blocked,
    landlock,
    machinery,
    namespace,
    need,
    run,
    seccomp,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def psup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[wu.Supervisor]:
    state = tmp_path_factory.mktemp("policies") / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        yield sup


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A checkout to work in (with a .git), and a directory outside it."""
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "src").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim").write_text("intact\n")
    for path in (tmp_path, ws, tmp_path / "outside"):
        path.chmod(0o777)  # another user's run of the suite too
    return ws


# -- the value type -------------------------------------------------------------------


def test_a_policy_checks_itself_and_names_the_field() -> None:
    with pytest.raises(wu.SpecError, match="write= is a list of paths"):
        wu.Sandbox(write="/tmp")
    with pytest.raises(wu.SpecError, match="TCP ports, not addresses"):
        wu.Sandbox(network=["example.com:443"])  # type: ignore[list-item]
    with pytest.raises(wu.SpecError, match="from 1 to 65535"):
        wu.Sandbox(network=[0])
    with pytest.raises(wu.SpecError, match="memory= must be a positive int"):
        wu.Sandbox(memory=-1)
    with pytest.raises(wu.SpecError, match="cpu_seconds"):
        wu.Sandbox(cpu_seconds=float("nan"))
    assert wu.Sandbox(network=["443", 80, 443]).network == (80, 443)  # type: ignore[list-item]
    assert wu.Sandbox(write=["."]).write == (os.getcwd(),)


def test_presets_have_the_names_users_know(tmp_path: Path) -> None:
    assert wu.Sandbox.read_only() == wu.Sandbox(write=(), network=False)
    ws = wu.Sandbox.workspace(tmp_path)
    assert (ws.write, ws.network, ws.read) == ((str(tmp_path),), False, None)
    assert wu.Sandbox().allowed_network is True
    assert wu.Sandbox.workspace(tmp_path, network=True).network is True
    assert not wu.Sandbox.none().confined
    assert repr(wu.Sandbox.none()) == "Sandbox.none()"
    assert wu.Sandbox().is_default


@pytest.mark.parametrize(
    "policy",
    [
        wu.Sandbox(),
        wu.Sandbox.none(),
        wu.Sandbox.read_only(),
        wu.Sandbox(write=("/a", "/b"), read=("/c",), read_only_paths=("x",), network=(443,)),
        wu.Sandbox(memory=1 << 30, cpu_seconds=2.5, processes=10, file_size=1, open_files=64),
        wu.Sandbox(required=False, network=True),
    ],
)
def test_a_policy_comes_back_from_its_json(policy: wu.Sandbox) -> None:
    data = orjson.loads(orjson.dumps(policy.to_json()))
    assert wu.Sandbox.from_json(data) == policy


def test_a_child_may_only_narrow_its_parents_policy(tmp_path: Path) -> None:
    parent = wu.Sandbox(write=(str(tmp_path),), network=(443, 80), memory=1 << 30)
    inner = str(tmp_path / "inner")
    child = parent.narrowed(wu.Sandbox(write=(inner,), network=(443,)))
    assert (child.write, child.network, child.memory) == ((inner,), (443,), 1 << 30)
    assert parent.narrowed(None) == parent
    for wider, what in [
        (wu.Sandbox(write=("/",)), "outside them"),
        (wu.Sandbox(write=(inner,), memory=2 << 30), "may not exceed"),
        (wu.Sandbox(network=True), "whole network"),
        (wu.Sandbox(network=(22,)), "22"),
        (wu.Sandbox.none(), "Sandbox.none"),
    ]:
        with pytest.raises(wu.SandboxEscalation, match=what):
            parent.narrowed(wider)
    with pytest.raises(wu.SandboxEscalation, match="its parent has none"):
        wu.Sandbox(network=False).narrowed(wu.Sandbox(network=(443,)))


# -- filesystem ---------------------------------------------------------------------


WRITES_OUTSIDE = {
    "direct": "open(victim, 'w').write('changed')",
    "symlink": "os.symlink(victim, ws + '/link'); open(ws + '/link', 'w').write('changed')",
    "hardlink": "os.link(victim, ws + '/hard'); open(ws + '/hard', 'w').write('changed')",
    "rename": "os.rename(victim, ws + '/moved')",
    "proc-root": "open('/proc/self/root' + victim, 'w').write('changed')",
}


@pytest.mark.parametrize("way", sorted(WRITES_OUTSIDE))
@pytest.mark.parametrize("how", HOWS)
def test_a_workspace_unit_cannot_write_outside_it(
    psup: wu.Supervisor, work: Path, how: str, way: str
) -> None:
    need(landlock(2))
    victim = work.parent / "outside" / "victim"
    policy = wu.Sandbox.workspace(work)
    verdict = run(psup, how, WRITES_OUTSIDE[way], sandbox=policy, victim=str(victim), ws=str(work))
    assert blocked(verdict), verdict
    assert victim.read_text() == "intact\n"


@pytest.mark.parametrize("how", HOWS)
def test_a_workspace_unit_writes_inside_it_and_in_its_own_tmpdir(
    psup: wu.Supervisor, work: Path, how: str
) -> None:
    need(landlock(1))
    code = """
open(ws + '/src/made', 'w').write('by the unit')
tmp = os.environ['TMPDIR']
assert tmp.startswith('/'), tmp
open(tmp + '/scratch', 'w').write('x')
import tempfile
tempfile.mkstemp()
"""
    verdict = run(psup, how, code, sandbox=wu.Sandbox.workspace(work), ws=str(work))
    assert verdict == ESCAPED, verdict
    assert (work / "src" / "made").read_text() == "by the unit"


@pytest.mark.parametrize("how", HOWS)
def test_git_stays_read_only_under_a_workspace(psup: wu.Supervisor, work: Path, how: str) -> None:
    need(namespace)
    code = "open(ws + '/.git/config', 'a').write('[core]\\n\\thooksPath = /tmp\\n')"
    verdict = run(psup, how, code, sandbox=wu.Sandbox.workspace(work), ws=str(work))
    assert blocked(verdict), verdict
    assert (work / ".git" / "config").read_text() == "[core]\n"
    read = "assert open(ws + '/.git/config').read().startswith('[core]')"
    assert run(psup, how, read, sandbox=wu.Sandbox.workspace(work), ws=str(work)) == ESCAPED


@pytest.mark.parametrize("how", HOWS)
def test_read_only_writes_nothing_but_its_tmpdir(psup: wu.Supervisor, work: Path, how: str) -> None:
    need(landlock(1))
    code = "open(ws + '/src/new', 'w')"
    verdict = run(psup, how, code, sandbox=wu.Sandbox.read_only(), ws=str(work))
    assert blocked(verdict), verdict
    readable = "assert open(ws + '/.git/config').read()"
    assert run(psup, how, readable, sandbox=wu.Sandbox.read_only(), ws=str(work)) == ESCAPED


@pytest.mark.parametrize("how", HOWS)
def test_limited_reads_see_only_their_roots(psup: wu.Supervisor, work: Path, how: str) -> None:
    need(landlock(1))
    policy = wu.Sandbox(read=(str(work),))
    victim = str(work.parent / "outside" / "victim")
    assert blocked(verdict := run(psup, how, "open(v).read()", sandbox=policy, v=victim)), verdict
    inside = "assert open(ws + '/.git/config').read()"
    assert run(psup, how, inside, sandbox=policy, ws=str(work)) == ESCAPED


def test_a_write_root_that_does_not_exist_is_refused(psup: wu.Supervisor, tmp_path: Path) -> None:
    with pytest.raises(wu.SpecError, match="does not exist"):
        psup.shell(["true"], sandbox=wu.Sandbox.workspace(tmp_path / "nowhere"))
    with pytest.raises(wu.SpecError, match="inside the state dir"):
        psup.shell(["true"], sandbox=wu.Sandbox.workspace(psup.state_dir))


# -- network ------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on the loopback that accepts (and closes) every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


SOCKETS = {
    "tcp": "socket.socket(socket.AF_INET, socket.SOCK_STREAM)",
    "udp": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM)",
    "tcp6": "socket.socket(socket.AF_INET6, socket.SOCK_STREAM)",
    "raw-packet": "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
    "io_uring": """
params = ctypes.create_string_buffer(120)
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(425, 8, params) < 0:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))
""",
}


@pytest.mark.parametrize("kind", sorted(SOCKETS))
@pytest.mark.parametrize("how", HOWS)
def test_no_network_refuses_every_socket_but_unix(psup: wu.Supervisor, how: str, kind: str) -> None:
    need(seccomp)
    verdict = run(psup, how, SOCKETS[kind], sandbox=wu.Sandbox(network=False))
    assert blocked(verdict), verdict
    unix = "a, b = socket.socketpair(); a.close(); b.close(); socket.socket(socket.AF_UNIX)"
    assert run(psup, how, unix, sandbox=wu.Sandbox(network=False)) == ESCAPED


CONNECT = "socket.create_connection(('127.0.0.1', port), timeout=5).close()"


@pytest.mark.parametrize("how", HOWS)
def test_a_port_list_lets_through_its_ports_only(
    psup: wu.Supervisor, listener: int, how: str
) -> None:
    need(seccomp)
    need(landlock(4))
    allowed = wu.Sandbox(network=[listener])
    assert run(psup, how, CONNECT, sandbox=allowed, port=listener) == ESCAPED
    other = wu.Sandbox(network=[listener + 1 if listener < 65535 else listener - 1])
    assert blocked(verdict := run(psup, how, CONNECT, sandbox=other, port=listener)), verdict
    udp = SOCKETS["udp"]
    assert blocked(verdict := run(psup, how, udp, sandbox=allowed)), verdict


# -- children, durability, visibility -------------------------------------------------


def spawn_child(ws: str, asked: dict[str, object] | None) -> str:
    """In a unit: start a child shell with ``asked`` (a policy's JSON), or the parent's."""
    ctx = wu.current()
    policy = None if asked is None else wu.Sandbox.from_json(asked)
    try:
        child = ctx.shell(["sh", "-c", f"echo child > {ws}/child-wrote"], sandbox=policy)
    except wu.SandboxEscalation as exc:
        return f"refused: {exc}"
    record = ctx.wait(child, timeout=WAIT)
    return f"{record.status.value} {ctx.get(child).sandbox!r}"


def test_children_inherit_the_policy_and_may_only_narrow_it(
    psup: wu.Supervisor, work: Path
) -> None:
    need(landlock(1))
    policy = wu.Sandbox.workspace(work)
    inherited = psup.result(psup.agent(spawn_child, str(work), None, sandbox=policy).id, WAIT)
    assert inherited == f"completed {policy!r}"
    assert (work / "child-wrote").read_text() == "child\n"
    wider = wu.Sandbox(network=True, write=(str(work),)).to_json()
    refused = psup.result(psup.agent(spawn_child, str(work), wider, sandbox=policy).id, WAIT)
    assert refused.startswith("refused: ")
    assert "network" in refused
    none = wu.Sandbox.none().to_json()
    refused = psup.result(psup.agent(spawn_child, str(work), none, sandbox=policy).id, WAIT)
    assert "Sandbox.none()" in refused


def test_the_ledger_keeps_each_units_policy(psup: wu.Supervisor, work: Path) -> None:
    policy = wu.Sandbox.workspace(work, memory=1 << 30)
    handle = psup.shell(["true"], sandbox=policy)
    psup.wait(handle.id, timeout=WAIT)
    conn = sqlite3.connect(f"file:{psup.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        (stored,) = conn.execute("SELECT sandbox FROM units WHERE id = ?", (handle.id,)).fetchone()
    finally:
        conn.close()
    assert wu.Sandbox.from_json(orjson.loads(stored)["policy"]) == policy
    with wu.connect(psup.state_dir) as client:
        assert client.get(handle.id).sandbox == policy
    again = psup.retry(psup.wait(psup.shell(["false"], sandbox=policy).id, WAIT).id)
    assert psup.get(again.id).sandbox == policy


def test_a_resubmit_with_another_policy_conflicts(psup: wu.Supervisor, work: Path) -> None:
    first = psup.shell(["true"], key="policy-key", sandbox=wu.Sandbox.workspace(work))
    assert psup.shell(["true"], key="policy-key", sandbox=wu.Sandbox.workspace(work)).id == first.id
    with pytest.raises(wu.IdempotencyConflict):
        psup.shell(["true"], key="policy-key", sandbox=wu.Sandbox.read_only())


def test_an_agent_transcript_starts_with_its_policy(psup: wu.Supervisor, work: Path) -> None:
    handle = psup.agent(len, "abc", sandbox=wu.Sandbox.workspace(work))
    psup.wait(handle.id, timeout=WAIT)
    first = orjson.loads(
        (psup.state_dir / "transcripts" / f"{handle.id}.jsonl").read_bytes().splitlines()[0]
    )
    assert first["type"] == "start"  # the first line says what the unit runs under
    under = first["sandbox"]
    assert under["policy"] == {"write": [str(work)], "network": False}
    assert any(line.startswith("filesystem: Landlock") for line in under["enforced"]) or (
        Path("/proc/self").exists() and not need(lambda m: None).landlock
    )


def test_what_cannot_be_enforced_fails_the_submit_unless_not_required(
    psup: wu.Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolation = machinery(psup).isolation
    blind = dataclasses.replace(isolation.machine, seccomp=False)
    monkeypatch.setattr(isolation, "machine", blind)
    with pytest.raises(wu.SandboxUnavailable, match="network"):
        psup.shell(["true"], sandbox=wu.Sandbox(network=False))
    handle = psup.shell(["true"], sandbox=wu.Sandbox(network=False, required=False))
    record = psup.wait(handle.id, timeout=WAIT)
    assert any(note.startswith("network:") for note in record.unenforced), record.unenforced


def test_the_ray_kind_takes_no_sandbox(psup: wu.Supervisor) -> None:
    spec = RemoteSpec.build(len, ("x",), {})
    with pytest.raises(wu.SpecError, match="Ray"):
        psup.submit("r", spec, sandbox=wu.Sandbox())


def test_show_says_what_a_unit_runs_under(psup: wu.Supervisor, work: Path) -> None:
    policy = wu.Sandbox.workspace(work, memory=1 << 30)
    handle = psup.shell(["true"], sandbox=policy)
    psup.wait(handle.id, timeout=WAIT)
    show = ["show", handle.id, "--state", str(psup.state_dir)]
    result = CliRunner().invoke(cli, show, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert f"write {work} (and TMPDIR); no network; memory" in result.output
    doc = CliRunner().invoke(cli, ["show", handle.id, "--json", "--state", str(psup.state_dir)])
    assert orjson.loads(doc.output)["sandbox"]["policy"] == policy.to_json()
