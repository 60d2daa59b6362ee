"""The escape suite: what a unit under the default protection cannot do (invariant 15).

Every case runs as a shell unit and as an agent, and tries what an LLM-written
command could: read the key or the shared secret, open, rename, truncate or
delete the ledger, write another unit's output, signal or trace the
supervisor, the zygote, its guard or a sibling, read their ``/proc`` files.
Each is refused, and what it aimed at is still there afterwards. A case this
machine cannot close skips, naming the kernel feature it lacks
(``workunits doctor`` says the same). The cases that must keep working are at
the end.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import workunits as wu

from .conftest import eventually, parent_of
from .sandbox_support import (
    ESCAPED,
    HOWS,
    alive,
    blocked,
    landlock,
    machinery,
    namespace,
    need,
    run,
)

pytestmark = pytest.mark.timeout(120)

# A policy narrows the default protection, never undoes it: the runtime's cases run
# under the default and under a policy (read-only, with no network).
POLICIES = {"default": None, "policy": "read-only"}


def policy_of(name: str) -> wu.Sandbox | None:
    return None if POLICIES[name] is None else wu.Sandbox.read_only()


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "shared.secret"
    path.write_text("a shared secret of more than sixteen bytes\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def isup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[wu.Supervisor]:
    """A supervisor with the state dir's own key, and a sibling unit that runs meanwhile."""
    state = tmp_path_factory.mktemp("isolation") / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        yield sup


@pytest.fixture(scope="module")
def ssup(tmp_path_factory: pytest.TempPathFactory, secret: Path) -> Iterator[wu.Supervisor]:
    """A supervisor given a shared secret file through ``WORKUNITS_SECRET_FILE``."""
    state = tmp_path_factory.mktemp("secret-sup") / "state"
    # Set while the supervisor and its zygote start (the zygote copies the environment
    # then), and not a moment longer: other supervisors of this module have none.
    os.environ["WORKUNITS_SECRET_FILE"] = str(secret)
    try:
        sup = wu.Supervisor(state, install_signal_handlers=False)
        machinery(sup).zygote.start()
    finally:
        del os.environ["WORKUNITS_SECRET_FILE"]
    with sup:
        yield sup


@pytest.fixture(scope="module")
def sibling(isup: wu.Supervisor) -> Iterator[wu.WorkRecord]:
    """A unit that runs while the others try to reach it."""
    handle = isup.shell(["sleep", "600"])
    eventually(lambda: isup.get(handle.id).pid, what="the sibling's pid")
    yield isup.get(handle.id)
    isup.kill(handle.id)


def zygote_of(sup: wu.Supervisor) -> int:
    machinery(sup).zygote.start()  # started in the background: it may not be up yet
    pid = machinery(sup).zygote.pid
    assert pid is not None
    return int(pid)


# -- the state dir and the runtime's secrets ------------------------------------------


@pytest.mark.parametrize("under", sorted(POLICIES))
@pytest.mark.parametrize("how", HOWS)
def test_a_unit_cannot_read_the_key(isup: wu.Supervisor, how: str, under: str) -> None:
    need(namespace)
    key = isup.state_dir / "secret.key"
    assert key.exists()
    code = "open(key, 'rb').read()"
    verdict = run(isup, how, code, sandbox=policy_of(under), key=str(key))
    assert blocked(verdict), verdict


@pytest.mark.parametrize("how", HOWS)
def test_a_unit_cannot_list_the_state_dir(isup: wu.Supervisor, how: str) -> None:
    need(namespace)
    # Root may list the empty tmpfs over it; nothing of the state dir is in it.
    code = "if os.listdir(state): raise SystemExit('listed')\nraise PermissionError('empty')"
    verdict = run(isup, how, code, state=str(isup.state_dir))
    assert blocked(verdict), verdict


@pytest.mark.parametrize("how", HOWS)
def test_a_unit_has_no_secret_file_and_cannot_read_it(
    ssup: wu.Supervisor, secret: Path, how: str
) -> None:
    need(namespace)
    code = """
if os.environ.get("WORKUNITS_SECRET_FILE"):
    raise SystemExit("the secret file's name is in the unit's environment")
open(path, "rb").read()
"""
    verdict = run(ssup, how, code, path=str(secret))
    assert blocked(verdict), verdict
    assert secret.read_text().startswith("a shared secret")


LEDGER_ATTACKS = {
    "open": "open(ledger, 'r+b').close()",
    "rename": "os.rename(ledger, ledger + '.moved')",
    "truncate": "os.truncate(ledger, 0)",
    "delete": "os.unlink(ledger); os.unlink(ledger + '-wal'); os.unlink(ledger + '-shm')",
}


@pytest.mark.parametrize("under", sorted(POLICIES))
@pytest.mark.parametrize("attack", sorted(LEDGER_ATTACKS))
@pytest.mark.parametrize("how", HOWS)
def test_a_unit_cannot_touch_the_ledger(
    isup: wu.Supervisor, how: str, attack: str, under: str
) -> None:
    need(namespace)
    ledger = isup.state_dir / "ledger.db"
    code = LEDGER_ATTACKS[attack]
    verdict = run(isup, how, code, sandbox=policy_of(under), ledger=str(ledger))
    assert blocked(verdict), verdict
    assert ledger.stat().st_size > 0
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*) FROM units").fetchone()[0] > 0
    finally:
        conn.close()
    isup.shell(["true"]).wait(30)  # the supervisor takes work as before


@pytest.mark.parametrize("how", HOWS)
def test_a_unit_cannot_write_another_units_output(
    isup: wu.Supervisor, sibling: wu.WorkRecord, how: str
) -> None:
    need(namespace)
    assert sibling.output_path is not None
    code = "with open(out, 'ab') as f: f.write(b'forged')"
    verdict = run(isup, how, code, out=sibling.output_path)
    assert blocked(verdict), verdict
    assert b"forged" not in isup.read_output(sibling.id)


# -- other processes ----------------------------------------------------------------------


def targets(sup: wu.Supervisor, sibling: wu.WorkRecord) -> dict[str, int]:
    zygote = zygote_of(sup)
    assert sibling.pid is not None
    return {
        "supervisor": os.getpid(),
        "zygote": zygote,
        "guard": parent_of(zygote),
        "sibling": sibling.pid,
    }


@pytest.mark.parametrize("under", sorted(POLICIES))
@pytest.mark.parametrize("target", ["supervisor", "zygote", "guard", "sibling"])
@pytest.mark.parametrize("how", HOWS)
def test_a_unit_cannot_signal_a_process_outside_its_tree(
    isup: wu.Supervisor, sibling: wu.WorkRecord, how: str, target: str, under: str
) -> None:
    need(landlock(6))
    pid = targets(isup, sibling)[target]
    # SIGCONT: harmless if it got through, and as refused as SIGKILL when it does not.
    code = "os.kill(pid, signal.SIGCONT)"
    verdict = run(isup, how, code, sandbox=policy_of(under), pid=pid)
    assert blocked(verdict), verdict
    if how == "shell":
        handle = isup.shell(["kill", "-9", str(pid)])
        assert isup.wait(handle.id, timeout=30).exit_code != 0
    assert alive(pid)
    assert isup.get(sibling.id).status is wu.Status.RUNNING


PTRACE = """
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, pid, 0, 0) != 0:  # PTRACE_ATTACH
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))
"""


@pytest.mark.parametrize("target", ["supervisor", "zygote", "sibling"])
@pytest.mark.parametrize("how", HOWS)
def test_a_unit_cannot_trace_a_process_outside_its_tree(
    isup: wu.Supervisor, sibling: wu.WorkRecord, how: str, target: str
) -> None:
    need(landlock(1))
    pid = targets(isup, sibling)[target]
    assert blocked(verdict := run(isup, how, PTRACE, pid=pid)), verdict
    mem = "open(f'/proc/{pid}/mem', 'rb').close()"
    assert blocked(verdict := run(isup, how, mem, pid=pid)), verdict


PROC_FDS = """
for fd in os.listdir(f"/proc/{pid}/fd"):
    os.readlink(f"/proc/{pid}/fd/{fd}")
    open(f"/proc/{pid}/fd/{fd}", "rb").close()
"""


@pytest.mark.parametrize("how", HOWS)
def test_a_unit_cannot_read_the_supervisors_descriptors_or_environment(
    isup: wu.Supervisor, how: str
) -> None:
    need(landlock(1))
    pid = os.getpid()
    assert blocked(verdict := run(isup, how, PROC_FDS, pid=pid)), verdict
    environ = "open(f'/proc/{pid}/environ', 'rb').read()"
    assert blocked(verdict := run(isup, how, environ, pid=pid)), verdict
    zygote = zygote_of(isup)
    assert blocked(verdict := run(isup, how, environ, pid=zygote)), verdict


@pytest.mark.parametrize("how", HOWS)
def test_root_cannot_undo_its_confinement(isup: wu.Supervisor, how: str) -> None:
    """Root's units: no unmounting what hides the state dir, no way back into the
    runtime's namespace, no cgroup of another unit to kill, no core pattern to set."""
    machine = need(namespace)
    if machine.uid != 0:
        pytest.skip("a case for root's units only")
    state = str(isup.state_dir)
    umount = """
libc = ctypes.CDLL(None, use_errno=True)
if libc.umount2(state.encode(), 2) != 0:  # MNT_DETACH
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))
"""
    assert blocked(verdict := run(isup, how, umount, state=state)), verdict
    setns = """
fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
libc = ctypes.CDLL(None, use_errno=True)
if libc.setns(fd, 0) != 0:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))
"""
    assert blocked(verdict := run(isup, how, setns, pid=os.getpid())), verdict
    core = "open('/proc/sys/kernel/core_pattern', 'w').write('core')"
    assert blocked(verdict := run(isup, how, core)), verdict
    cgroups = "os.mkdir('/sys/fs/cgroup/workunits-escape-test')"
    assert blocked(verdict := run(isup, how, cgroups)), verdict


# -- what keeps working ---------------------------------------------------------------


@pytest.mark.parametrize("how", HOWS)
def test_a_unit_keeps_its_user_network_and_every_path_outside_the_state_dir(
    isup: wu.Supervisor, how: str
) -> None:
    """``ls ..`` of the directory that holds the state dir, a new file beside it, its
    uid, and a socket."""
    beside = isup.state_dir.parent
    code = f"""
assert os.getuid() == {os.getuid()}, os.getuid()
names = os.listdir(beside)
assert "state" in names, names
with open(os.path.join(beside, "from-" + who), "w") as f:
    f.write("made by a unit")
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
"""
    verdict = run(isup, how, code, beside=str(beside), who=how)
    assert verdict == ESCAPED, verdict  # it went through
    assert (beside / f"from-{how}").read_text() == "made by a unit"


@pytest.mark.parametrize("under", sorted(POLICIES))
@pytest.mark.parametrize("name", ["stdout", "stderr"])
def test_a_shell_writes_to_its_output_by_name(isup: wu.Supervisor, name: str, under: str) -> None:
    """``/dev/stdout`` is its output file opened again, by a path in the hidden state dir."""
    handle = isup.shell(f"echo x > /dev/{name}", sandbox=policy_of(under))
    record = isup.wait(handle.id, timeout=30)
    assert record.status is wu.Status.COMPLETED, record.describe_end()
    assert record.output_tail == b"x\n"


def test_a_shell_whose_log_is_beside_the_state_dir_writes_it(isup: wu.Supervisor) -> None:
    log = isup.state_dir.parent / "beside.log"
    handle = isup.shell("echo kept; echo again > /dev/stdout", log=str(log))
    record = isup.wait(handle.id, timeout=30)
    assert record.status is wu.Status.COMPLETED, record.describe_end()
    assert log.read_text() == "again\n"  # > truncates, as it would anywhere


def test_a_unit_whose_directory_holds_the_state_dir_makes_files_there(
    isup: wu.Supervisor,
) -> None:
    here = isup.state_dir.parent
    record = isup.wait(isup.shell("echo made > new-file && ls", cwd=str(here)).id, timeout=30)
    assert record.status is wu.Status.COMPLETED, record.describe_end()
    assert (here / "new-file").read_text() == "made\n"
    assert b"state" in record.output_tail.split()


def test_setuid_programs_run_without_their_privileges(isup: wu.Supervisor) -> None:
    """no_new_privs: ``sudo`` refuses as its manual says ("the no new privileges flag is
    set"); another user's setuid program runs as the unit's user."""
    record = isup.wait(isup.shell("grep NoNewPrivs /proc/self/status").id, timeout=30)
    assert record.output_tail.split() == [b"NoNewPrivs:", b"1"]
    sudo = "/usr/bin/sudo"
    if not os.path.exists(sudo):
        pytest.skip("sudo is not installed here (make test installs it as root)")
    record = isup.wait(isup.shell([sudo, "-n", "true"]).id, timeout=30)
    if os.geteuid() == 0:
        assert record.status is wu.Status.COMPLETED, record.output_tail  # root needs no setuid
    else:
        assert record.exit_code != 0
        assert b"no new privileges" in record.output_tail


def test_a_unit_confined_by_default_says_so(isup: wu.Supervisor) -> None:
    record = isup.wait(isup.shell(["true"]).id, timeout=30)
    assert record.sandbox == wu.Sandbox()
    assert record.unenforced == tuple(machinery(isup).isolation.missing())


def test_sandbox_none_runs_a_unit_unconfined(isup: wu.Supervisor) -> None:
    code = "open(key, 'rb').read()"
    key = str(isup.state_dir / "secret.key")
    verdict = run(isup, "agent", code, sandbox=wu.Sandbox.none(), key=key)
    assert verdict == ESCAPED
    record = isup.wait(isup.shell(["cat", key], sandbox=wu.Sandbox.none()).id, timeout=30)
    assert record.status is wu.Status.COMPLETED
    assert record.sandbox == wu.Sandbox.none()


def test_isolation_off_confines_nothing_and_says_so(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state", isolation="off", install_signal_handlers=False) as sup:
        key = str(sup.state_dir / "secret.key")
        assert run(sup, "agent", "open(key, 'rb').read()", key=key) == ESCAPED
        record = sup.wait(sup.shell(["true"]).id, timeout=30)
        assert record.unenforced == ('isolation: off (Supervisor(isolation="off"))',)


def test_isolation_takes_three_words(tmp_path: Path) -> None:
    with pytest.raises(wu.SpecError, match="isolation must be one of"):
        wu.Supervisor(tmp_path / "state", isolation="strict")


def test_isolation_required_starts_where_everything_holds_and_refuses_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = need(lambda m: None)
    missing = machine.missing_defaults()
    if missing:
        with pytest.raises(wu.SandboxUnavailable, match='isolation="required"'):
            wu.Supervisor(tmp_path / "state", isolation="required")
        return
    with wu.Supervisor(
        tmp_path / "state", isolation="required", install_signal_handlers=False
    ) as sup:
        assert sup.wait(sup.shell(["true"]).id, timeout=30).status is wu.Status.COMPLETED


def test_the_missing_protections_are_said_once_at_start(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """What the machine cannot give goes to stderr once, as the first zygote is ready."""
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        sup.wait(sup.shell(["true"]).id, timeout=30)
        sup.wait(sup.shell(["true"]).id, timeout=30)
        missing = machinery(sup).isolation.missing()
    err = capfd.readouterr().err
    notices = [line for line in err.splitlines() if "less than full isolation" in line]
    assert len(notices) == (1 if missing else 0), err
    for why in missing:
        assert why in notices[0]


def test_a_unit_cannot_run_from_inside_the_state_dir(isup: wu.Supervisor) -> None:
    with pytest.raises(wu.SpecError, match="inside the state dir"):
        isup.shell(["true"], cwd=str(isup.state_dir / "output"))
    none = isup.shell(["true"], cwd=str(isup.state_dir), sandbox=wu.Sandbox.none())
    assert isup.wait(none.id, timeout=30).status is wu.Status.COMPLETED


def test_the_runtime_processes_are_not_dumpable(isup: wu.Supervisor) -> None:
    """Not dumpable: their /proc files belong to root, closed to the user's other processes
    (a unit that Landlock does not hold back included)."""
    if os.geteuid() == 0:
        pytest.skip("root owns every /proc file: non-dumpable shows only to another user")
    zygote = zygote_of(isup)
    for pid in (os.getpid(), zygote, parent_of(zygote)):
        assert os.stat(f"/proc/{pid}/environ").st_uid == 0, pid
    with pytest.raises(PermissionError):
        Path(f"/proc/{zygote}/environ").read_bytes()


class _RunsCode:
    """Pickles as a call of ``os.makedirs``: what a crafted frame would run where it loads."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.makedirs, (self.path,)


def send_a_crafted_frame(path: str) -> None:
    wu.current().send(_RunsCode(path))
    raise SystemExit(0)


def test_a_unit_cannot_run_code_in_the_supervisor_through_its_channel(
    isup: wu.Supervisor,
) -> None:
    """The supervisor reads a unit's frames with a restricted unpickler: a frame that
    names a function (here ``os.makedirs``, in the state dir the unit cannot reach)
    breaks the unit's channel, and nothing runs."""
    marker = isup.state_dir / "made-by-a-unit"
    record = isup.wait(isup.agent(send_a_crafted_frame, str(marker)).id, timeout=60)
    assert record.status is wu.Status.FAILED
    assert "BrokenChannel" in (record.error or ""), record.error
    assert not marker.exists()


WORKUNITS_IN_A_UNIT = """set -e
child=$({wu} submit -q -- echo from-a-child)
{wu} wait "$child" > /dev/null
{wu} result "$child"
{wu} show --json "$child"
{wu} ls
{wu} tail "$child" 2>&1 || true
"""


def test_workunits_commands_in_a_unit_reach_the_supervisor_through_its_channel(
    isup: wu.Supervisor,
) -> None:
    """The state dir is hidden: ``workunits`` inside a unit speaks for the unit, through
    its gateway, and what it submits is a child of the unit, under its sandbox."""
    need(namespace)
    script = WORKUNITS_IN_A_UNIT.format(wu=f"{sys.executable} -m workunits")
    handle = isup.shell(script, sandbox=wu.Sandbox(memory=1 << 30))
    record = isup.wait(handle.id, timeout=60)
    out = record.output_tail.decode()
    assert record.status is wu.Status.COMPLETED, out
    (child,) = [r for r in isup.list() if r.parent == handle.id]
    assert out.startswith("from-a-child\n"), out
    shown = orjson.loads(out.splitlines()[1])
    assert (shown["id"], shown["parent"], shown["status"]) == (child.id, handle.id, "completed")
    assert isup.get(child.id).sandbox == wu.Sandbox(memory=1 << 30)  # its parent's policy
    assert "hidden from units" in out  # tail reads the state dir: refused, saying why


def run_workunits(args: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "workunits", *args], capture_output=True, text=True, check=False
    )
    return done.stdout + done.stderr


def test_an_agents_subprocess_uses_the_gateway_too(isup: wu.Supervisor) -> None:
    need(namespace)
    out = isup.result(isup.agent(run_workunits, ["ls"]).id, timeout=60)
    assert out == ""  # no descendants yet, and no error reading a ledger
    other = isup.shell(["true"])
    isup.wait(other.id, timeout=30)
    refused = isup.result(isup.agent(run_workunits, ["kill", other.id]).id, timeout=60)
    assert "descendant" in refused  # not its own: out of its reach
