"""A shell's kept output: ``log=PATH`` (the caller's file) and ``keep_output=True`` (the state dir).

Real processes and files: the command writes into the log by descriptor, the
output file is a second name of it while the unit runs, the log stays after the
end, and readers of an ended unit get all of it from there.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests.client_support import FakeSupervisor
from tests.helpers import WAIT, read_until
from workunits._util import outputfile
from workunits._wire.durable import shell_from_durable, shell_to_durable
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, ShellSpec
from workunits.supervisor.events import Cursor
from workunits.testing import ManualClock

from .conftest import eventually

# More than the stored tail (64 KiB), so "the whole output" and "the tail" differ.
BIG = "seq 1 30000"
BIG_OUTPUT = b"".join(b"%d\n" % i for i in range(1, 30001))


@pytest.fixture
def client(state_dir: Path) -> Iterator[wu.Client]:
    with wu.connect(state_dir) as c:
        yield c


def _kept(sup: wu.Supervisor, work_id: str) -> Path:
    return Path(outputfile.log_path(sup.state_dir, work_id))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_a_log_gets_stdout_and_stderr_and_stays_after_the_end(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    log = tmp_path / "build.log"
    unit = sup.shell("echo out; echo err >&2", log=log)
    record = sup.wait(unit.id, WAIT)
    assert record.status is wu.Status.COMPLETED
    assert log.read_bytes() == b"out\nerr\n"
    assert record.output_tail == b"out\nerr\n"
    assert record.output_path is not None
    assert not os.path.lexists(record.output_path)  # the output file's name went at the end
    # The state dir points at the caller's file; it does not hold a copy.
    assert os.readlink(_kept(sup, unit.id)) == str(log)


def test_while_it_runs_the_output_file_is_a_second_name_of_the_log(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    log = tmp_path / "live.log"
    unit = sup.shell("echo started; exec sleep 30", log=log)
    assert read_until(sup, unit.id, b"started") == b"started\n"  # live readers: unchanged
    path = sup.get(unit.id).output_path
    assert path is not None
    assert Path(path).samefile(log)
    sup.kill(unit.id)
    assert sup.wait(unit.id, WAIT).status is wu.Status.KILLED
    assert log.read_bytes() == b"started\n"


def test_a_relative_log_is_taken_from_the_callers_directory(
    sup: wu.Supervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    unit = sup.shell(["echo", "here"], log="rel.log")
    monkeypatch.chdir("/")  # where the supervisor is when it launches does not matter
    sup.wait(unit.id, WAIT)
    assert (tmp_path / "rel.log").read_bytes() == b"here\n"
    assert os.readlink(_kept(sup, unit.id)) == str(tmp_path / "rel.log")


def test_a_first_attempt_truncates_a_log_that_exists(sup: wu.Supervisor, tmp_path: Path) -> None:
    log = tmp_path / "old.log"
    log.write_bytes(b"yesterday's output, much longer than today's\n")
    log.chmod(0o640)
    sup.wait(sup.shell("echo today", log=log).id, WAIT)
    assert log.read_bytes() == b"today\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o640  # the caller's file keeps its mode


def test_keep_output_keeps_the_whole_output_in_the_state_dir(sup: wu.Supervisor) -> None:
    unit = sup.shell(BIG, keep_output=True)
    record = sup.wait(unit.id, WAIT)
    kept = _kept(sup, unit.id)
    assert kept.read_bytes() == BIG_OUTPUT
    assert not kept.is_symlink()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert record.output_bytes == len(BIG_OUTPUT)
    assert record.output_tail == BIG_OUTPUT[-len(record.output_tail) :]
    assert len(record.output_tail) < len(BIG_OUTPUT)
    assert record.output_path is not None
    assert not os.path.lexists(record.output_path)


@pytest.mark.parametrize("where", ["log", "keep_output"])
def test_a_client_reads_an_ended_shell_whole_from_its_log(
    sup: wu.Supervisor, tmp_path: Path, where: str
) -> None:
    options: dict[str, Any] = (
        {"log": tmp_path / "big.log"} if where == "log" else {"keep_output": True}
    )
    unit = sup.shell(BIG, **options)
    sup.wait(unit.id, WAIT)
    with wu.connect(sup.state_dir) as client:
        assert b"".join(client.stream(unit.id)) == BIG_OUTPUT
        assert b"".join(client.stream(unit.id, follow=False)) == BIG_OUTPUT


def test_an_ended_shell_without_a_log_still_gives_only_its_tail(sup: wu.Supervisor) -> None:
    unit = sup.shell(BIG)
    record = sup.wait(unit.id, WAIT)
    with wu.connect(sup.state_dir) as client:
        assert b"".join(client.stream(unit.id)) == record.output_tail


def test_the_event_feed_reads_an_ended_shell_whole_from_its_log(sup: wu.Supervisor) -> None:
    unit = sup.shell(BIG, keep_output=True)
    sup.wait(unit.id, WAIT)
    got, cursor, done = b"", None, False
    while not done:
        batch = sup.events(unit.id, after=cursor)
        got += b"".join(ev.output for ev in batch.events if ev.type == "output")
        assert all(ev.type != "gap" for ev in batch.events)
        cursor, done = batch.cursor, batch.ended
    assert got == BIG_OUTPUT


def test_a_log_the_user_deleted_leaves_the_stored_tail(sup: wu.Supervisor, tmp_path: Path) -> None:
    log = tmp_path / "gone.log"
    unit = sup.shell(BIG, log=log)
    record = sup.wait(unit.id, WAIT)
    log.unlink()
    with wu.connect(sup.state_dir) as client:
        assert b"".join(client.stream(unit.id)) == record.output_tail
    batch = sup.events(unit.id, after=None)
    assert b"".join(ev.output for ev in batch.events if ev.type == "output") == (record.output_tail)


def test_what_the_user_writes_to_the_log_after_the_end_is_not_the_units(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    log = tmp_path / "mine.log"
    sup.wait(sup.shell("echo unit", log=log).id, WAIT)
    unit_id = sup.list(kind="shell")[-1].id
    with log.open("ab") as f:
        f.write(b"the user's own line\n")
    with wu.connect(sup.state_dir) as client:
        assert b"".join(client.stream(unit_id)) == b"unit\n"


def test_output_cap_applies_to_the_log(sup: wu.Supervisor, tmp_path: Path) -> None:
    log = tmp_path / "capped.log"
    record = sup.wait(sup.shell("yes", log=log, output_cap=4096).id, WAIT)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.OUTPUT_CAP)
    assert log.stat().st_size == 4096


def _child_shell_with_a_log(log: str) -> str:
    """An agent's body: a child shell whose output goes into ``log``."""
    child = wu.current().shell("echo from the child", log=log)
    return child.wait(timeout=WAIT).status.value


def test_a_units_child_shell_takes_a_log(sup: wu.Supervisor, tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    assert sup.agent(_child_shell_with_a_log, str(log)).result(timeout=WAIT) == "completed"
    assert log.read_bytes() == b"from the child\n"


# -- later attempts append ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["log", "keep_output"])
def test_a_retried_attempt_appends_to_the_log(
    msup: wu.Supervisor, clock: ManualClock, tmp_path: Path, where: str
) -> None:
    log = tmp_path / "retried.log"
    options: dict[str, Any] = {"log": log} if where == "log" else {"keep_output": True}
    policy = wu.Retry(max_attempts=2, initial=1.0, exit_codes=(3,), jitter=False)
    unit = msup.shell("echo run; exit 3", retry=policy, **options)
    eventually(lambda: msup.get(unit.id).retry_at is not None, what="the first attempt to fail")
    clock.advance(1.0)
    msup.tick()
    record = msup.wait(unit.id, WAIT)
    assert (record.status, record.attempt) == (wu.Status.FAILED, 2)
    kept = log if where == "log" else _kept(msup, unit.id)
    assert kept.read_bytes() == b"run\nrun\n"
    assert record.output_tail == b"run\nrun\n"


def test_a_shell_resumed_after_its_supervisor_died_appends_to_its_log(
    state_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "resumed.log"
    with wu.connect(state_dir) as client:
        unit = client.shell("echo second", on_lost="restart", log=log)
    fake = FakeSupervisor(state_dir)
    try:
        fake.open_session()
        fake.start(unit.id)  # attempt 1 "ran" and wrote into the log, then its host died
        fake.ledger.attempts.write(unit.id, attempt=1, pid=_dead_pid())
        log.write_bytes(b"first\n")
        fake.die()
    finally:
        fake.close()
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        record = sup.wait(unit.id, WAIT)
        assert (record.status, record.attempt) == (wu.Status.COMPLETED, 2)
    assert log.read_bytes() == b"first\nsecond\n"
    assert record.output_tail == b"first\nsecond\n"


def _resumed(state_dir: Path, command: str, log: Path | None, first: bytes) -> str:
    """A shell whose attempt 1 wrote ``first`` (into ``log``) and whose supervisor died."""
    with wu.connect(state_dir) as client:
        unit = client.shell(command, on_lost="restart", log=log)
    fake = FakeSupervisor(state_dir)
    try:
        fake.open_session()
        fake.start(unit.id)
        fake.ledger.attempts.write(unit.id, attempt=1, pid=_dead_pid())
        if log is not None:
            log.write_bytes(first)
        fake.die()
    finally:
        fake.close()
    return unit.id


def _output_after(sup: wu.Supervisor, work_id: str, cursor: str) -> bytes:
    got, after, done = b"", Cursor.parse(cursor), False
    while not done:
        batch = sup.events(work_id, after=after)
        got += b"".join(ev.output for ev in batch.events if ev.type == "output")
        after, done = batch.cursor, batch.ended
    return got


def test_a_follower_of_attempt_1_reads_a_resumed_shells_new_output_from_its_start(
    state_dir: Path,
) -> None:
    """Its cursor counted bytes of attempt 1's file: attempt 2's are not read from there."""
    work_id = _resumed(state_dir, "echo second", None, b"")
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        assert sup.wait(work_id, WAIT).attempt == 2
        assert _output_after(sup, work_id, "9-3-1") == b"second\n"  # not b"ond\n"


def test_a_follower_of_attempt_1_goes_on_in_a_resumed_shells_log(
    state_dir: Path, tmp_path: Path
) -> None:
    """A log goes on across attempts: the cursor's offset still holds, nothing repeats."""
    log = tmp_path / "resumed.log"
    work_id = _resumed(state_dir, "echo second", log, b"first\n")
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        assert sup.wait(work_id, WAIT).attempt == 2
        assert _output_after(sup, work_id, "9-6-1") == b"second\n"


# -- retention and backup ----------------------------------------------------------------


def test_retention_deletes_a_kept_log_and_never_the_callers(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    log = tmp_path / "theirs.log"
    theirs = sup.shell("echo theirs", log=log).id
    ours = sup.shell("echo ours", keep_output=True).id
    for work_id in (theirs, ours):
        sup.wait(work_id, WAIT)
    assert _kept(sup, ours).exists()
    with wu.connect(sup.state_dir) as client:
        units, freed = client.ledger.retention.expire_ended_before(time.time() + 1)
        assert units >= 2
        assert freed >= len(b"ours\n")
        assert client.row(ours).shown_status == "expired"
        assert b"".join(client.stream(ours)) == b""  # expired: nothing is left, no error
    assert not os.path.lexists(_kept(sup, ours))
    assert not os.path.lexists(_kept(sup, theirs))  # the pointer went...
    assert log.read_bytes() == b"theirs\n"  # ...the caller's file stays


def test_a_backup_holds_kept_logs_but_not_the_callers_files(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    theirs = sup.shell("echo theirs", log=tmp_path / "theirs.log").id
    ours = sup.shell("echo ours", keep_output=True).id
    for work_id in (theirs, ours):
        sup.wait(work_id, WAIT)
    dest = tmp_path / "copy"
    with wu.connect(sup.state_dir) as client:
        report = client.ledger.backup(dest)
    assert report.transcripts == 1
    assert Path(outputfile.log_path(dest, ours)).read_bytes() == b"ours\n"
    assert not os.path.lexists(outputfile.log_path(dest, theirs))


# -- refusals ------------------------------------------------------------------------------


def _bad_logs(tmp_path: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(why, shell options, what the SpecError says) for each log refused at submit."""
    a_dir = tmp_path / "a-dir"
    a_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    link = tmp_path / "link.log"
    link.symlink_to(victim)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return [
        ("both", {"log": tmp_path / "x.log", "keep_output": True}, "not both"),
        ("no directory", {"log": tmp_path / "nowhere" / "x.log"}, "does not exist; create it"),
        ("a directory", {"log": a_dir}, "is a directory; give the path of a file"),
        ("a symlink", {"log": link}, "is a symlink, and a log is never written through"),
        ("a fifo", {"log": fifo}, "is not a regular file"),
        ("a file as directory", {"log": victim / "x.log"}, "is not a directory"),
        ("empty", {"log": ""}, "non-empty file path"),
        ("not a path", {"log": 3}, "must be a file path"),
        ("bytes", {"log": b"/tmp/x"}, "must be a file path"),
        ("keep_output not bool", {"keep_output": 1}, "keep_output must be True or False"),
    ]


def test_bad_logs_are_refused_at_submit_and_touch_nothing(
    shared_sup: wu.Supervisor, tmp_path: Path
) -> None:
    for why, options, message in _bad_logs(tmp_path):
        with pytest.raises(wu.SpecError, match=message):
            shared_sup.shell("echo x", **options)
        with wu.connect(shared_sup.state_dir) as client, pytest.raises(wu.SpecError, match=message):
            client.shell("echo x", **options)
        assert shared_sup.list() == [], why
    assert (tmp_path / "victim").read_bytes() == b"keep me"
    assert not (tmp_path / "x.log").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_log_we_cannot_write_is_refused_at_submit(
    shared_sup: wu.Supervisor, tmp_path: Path
) -> None:
    read_only = tmp_path / "read-only.log"
    read_only.write_bytes(b"keep me")
    read_only.chmod(0o400)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(wu.SpecError, match="not writable by this user"):
        shared_sup.shell("true", log=read_only)
    with pytest.raises(wu.SpecError, match="cannot create a file in"):
        shared_sup.shell("true", log=locked / "x.log")
    assert shared_sup.list() == []
    assert read_only.read_bytes() == b"keep me"


def test_a_log_inside_the_state_dir_is_refused(shared_sup: wu.Supervisor) -> None:
    ledger = Path(shared_sup.state_dir) / "ledger.db"
    before = ledger.stat().st_size
    with pytest.raises(wu.SpecError, match="inside the state dir"):
        shared_sup.shell("true", log=ledger)
    with wu.connect(shared_sup.state_dir) as client, pytest.raises(wu.SpecError, match="inside"):
        client.shell("true", log=Path(shared_sup.state_dir) / "output" / "x.log")
    assert shared_sup.list() == []
    assert ledger.stat().st_size == before


def test_a_log_that_went_bad_before_the_launch_fails_the_unit_unrun(
    state_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "planted.log"
    marker = tmp_path / "ran"
    with wu.connect(state_dir) as client:
        unit = client.shell(f"touch {marker}; echo x", log=log)  # pending: no supervisor
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    log.symlink_to(victim)  # planted between the submit and the launch
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        record = sup.wait(unit.id, WAIT)
    assert record.status is wu.Status.FAILED
    assert record.error is not None
    assert "could not start" in record.error
    assert "is a symlink, and a log is never written through one" in record.error
    assert victim.read_bytes() == b"keep me"
    assert not marker.exists()  # the command never ran: its output had nowhere to go


# -- the durable spec ------------------------------------------------------------------------


def test_the_log_settings_survive_the_ledger(tmp_path: Path) -> None:
    log = str(tmp_path / "x.log")
    options: dict[str, Any]
    for options in ({"log": log}, {"keep_output": True}):
        spec = ShellSpec.build("true", cwd=None, env=None, output_cap=DEFAULT_OUTPUT_CAP, **options)
        assert shell_from_durable(shell_to_durable(spec, 5.0)) == (spec, 5.0)


def test_a_spec_stored_before_logs_reads_as_no_log_and_keeps_its_hash() -> None:
    old = {
        "argv": ["/bin/sh", "-c", "true"],
        "cwd": None,
        "env": None,
        "output_cap": DEFAULT_OUTPUT_CAP,
        "on_lost": "fail",
        "timeout": None,
    }
    spec, _ = shell_from_durable(old)
    assert (spec.log, spec.keep_output) == (None, False)
    # Written again, it is the same document: a resubmit by key finds its unit.
    assert shell_to_durable(spec, None) == old


def test_a_key_resubmitted_with_other_log_settings_conflicts(
    client: wu.Client, tmp_path: Path
) -> None:
    first = client.shell("make", key="k", log=tmp_path / "a.log")
    assert client.shell("make", key="k", log=tmp_path / "a.log").id == first.id
    for other in ({"log": tmp_path / "b.log"}, {"keep_output": True}, {}):
        with pytest.raises(wu.IdempotencyConflict):
            client.shell("make", key="k", **other)
