"""The state dir itself: refused when another user could control it, readable when read-only.

DESIGN §7: a state dir that is a symlink, belongs to another user, or that
group or others may write in is refused with one StateDirError naming the
path and why -- by the supervisor and by ``wu.connect`` alike, and nothing is
created or chmodded on the way. A second local user is ``nobody``, acting in
a child process (see ``tests.foreign_user``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

import workunits as wu
from tests.foreign_user import User, as_user, give
from workunits import Status, connect  # connect loads on first use: here, not in a child


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _plant_link(link: Path, target: Path) -> None:
    os.symlink(target, link)


def _opener(kind: str) -> object:
    if kind == "supervisor":
        return lambda path: wu.Supervisor(path, install_signal_handlers=False).close()
    return lambda path: wu.connect(path).close()


OPENERS = ["supervisor", "client"]


@pytest.mark.parametrize("opener", OPENERS)
def test_a_state_dir_symlink_planted_by_another_user_is_refused(
    nobody: User, shared_dir: Path, tmp_path: Path, opener: str
) -> None:
    # The victim's existing, 0755 directory; the attacker points a name in /tmp at it.
    target = tmp_path / "victim-dir"
    target.mkdir()
    target.chmod(0o755)
    link = shared_dir / "workunits-state"
    as_user(nobody, _plant_link, link, target)
    assert link.lstat().st_uid == nobody.uid

    with pytest.raises(wu.StateDirError, match="is a symlink") as caught:
        _opener(opener)(link)  # type: ignore[operator]

    assert str(link) in str(caught.value)
    assert _mode(target) == 0o755  # not chmodded through the link
    assert list(target.iterdir()) == []  # no ledger, no key, no lock file


@pytest.mark.parametrize("opener", OPENERS)
def test_a_state_dir_of_another_user_is_refused(nobody: User, tmp_path: Path, opener: str) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    give(theirs, nobody)
    with pytest.raises(wu.StateDirError, match=f"not ours: it belongs to uid {nobody.uid}"):
        _opener(opener)(theirs)  # type: ignore[operator]
    assert list(theirs.iterdir()) == []


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize("mode", [0o770, 0o702, 0o1777])
def test_a_state_dir_others_may_write_in_is_refused_not_repaired(
    tmp_path: Path, opener: str, mode: int
) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(mode)
    with pytest.raises(wu.StateDirError, match="writable by group or others"):
        _opener(opener)(loose)  # type: ignore[operator]
    assert _mode(loose) == mode
    assert list(loose.iterdir()) == []


@pytest.mark.parametrize("opener", OPENERS)
def test_a_file_as_the_state_dir_is_a_state_dir_error(tmp_path: Path, opener: str) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    with pytest.raises(wu.StateDirError, match=f"{a_file} is a file, not a directory"):
        _opener(opener)(a_file)  # type: ignore[operator]
    with pytest.raises(wu.StateDirError, match="below: Not a directory"):
        _opener(opener)(a_file / "below")  # type: ignore[operator]


def test_an_emptied_ledger_beside_its_key_is_refused_as_damaged(state_dir: Path) -> None:
    client = wu.connect(state_dir)
    client.shell("true")
    client.close()
    (state_dir / "ledger.db").write_bytes(b"")  # truncated: the units are gone
    for opener in (lambda: wu.connect(state_dir), lambda: wu.Supervisor(state_dir)):
        with pytest.raises(wu.LedgerCorrupt, match="is empty, but the key beside it"):
            opener()
    assert (state_dir / "ledger.db").stat().st_size == 0  # not made into a fresh ledger


def _damage(db: Path, page_no: int) -> None:
    """Overwrite one page with garbage: quick_check sees it, a start may not read it."""
    page = 4096
    data = bytearray(db.read_bytes())
    assert len(data) >= (page_no + 1) * page
    data[page * page_no : page * (page_no + 1)] = b"\xa5" * page
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("page_no", [-1, -2])
def test_the_supervisor_checks_the_ledger_before_writing_to_it(
    state_dir: Path, page_no: int
) -> None:
    with wu.connect(state_dir) as client:
        for n in range(60):
            client.shell(["echo", str(n)], description="x" * 200)
        for unit in client.list():
            client.ledger.attempts.write(unit.id, attempt=1, status=Status.KILLED, ended_at=1.0)
    db = state_dir / "ledger.db"
    assert not db.with_name("ledger.db-wal").exists()  # the last close checkpointed it
    _damage(db, db.stat().st_size // 4096 + page_no)
    before = hashlib.sha256(db.read_bytes()).hexdigest()

    with pytest.raises(wu.LedgerCorrupt, match="is damaged"):
        wu.Supervisor(state_dir, install_signal_handlers=False)

    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    wal = db.with_name("ledger.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # no session row went in either


# -- a read-only state dir ------------------------------------------------------


def _read_only_state_dir(base: Path, owner: User) -> tuple[Path, str, str]:
    """A state dir of ``owner``'s, mode 0500, with a completed agent and a shell unit."""
    state = base / "ro"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        agent = sup.agent(os.path.join, "a", "b")
        shell = sup.shell(["echo", "hello"])
        sup.wait(agent.id, timeout=30)
        sup.wait(shell.id, timeout=30)
    give(state, owner)
    state.chmod(0o500)
    return state, agent.id, shell.id


def _read_as_client(state: Path, agent_id: str, shell_id: str) -> dict[str, object]:
    with connect(state) as client:
        seen: dict[str, object] = {
            "readonly": client.readonly,
            "status": client.get(agent_id).status.value,
            "result": client.result(agent_id),
            "output": b"".join(client.stream(shell_id)),
            "supervisor": client.supervisor_running(),
        }
        try:
            client.shell("true")
        except wu.StateDirError as exc:
            seen["submit"] = str(exc)
        try:
            client.cancel(shell_id)  # ended: nothing to write, so no error either
            client.retain(shell_id)
        except wu.StateDirError as exc:
            seen["retain"] = str(exc)
    try:
        wu.Supervisor(state, install_signal_handlers=False)
    except wu.StateDirError as exc:
        seen["supervisor_error"] = str(exc)
    return seen


def test_a_read_only_state_dir_is_read_through_a_read_only_connection(
    nobody: User, shared_dir: Path
) -> None:
    base = shared_dir / "home"
    base.mkdir(mode=0o755)
    state, agent_id, shell_id = _read_only_state_dir(base, nobody)
    before = sorted(p.name for p in state.iterdir())

    seen = as_user(nobody, _read_as_client, state, agent_id, shell_id)

    assert seen["readonly"] is True
    assert seen["status"] == "completed"
    assert seen["result"] == os.path.join("a", "b")
    assert seen["output"] == b"hello\n"
    assert seen["supervisor"] is False
    assert f"the state dir {state} is read-only" in str(seen["submit"])
    assert "nothing was written" in str(seen["retain"])
    assert f"the state dir {state} is read-only" in str(seen["supervisor_error"])
    assert _mode(state) == 0o500  # never chmodded
    assert sorted(p.name for p in state.iterdir()) == before  # nothing created
