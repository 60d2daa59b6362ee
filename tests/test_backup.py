"""``workunits backup`` of a live state dir, restored elsewhere after a SIGKILL (issue 15).

The copy is taken while a supervisor process runs a resumable agent (with a
large spec and checkpoint in the value store) and clients keep submitting;
the supervisor is then SIGKILLed, and a supervisor opened on the copy, at
another path, resumes the agent from the copied checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import workunits as wu

from .conftest import eventually
from .large_values_jobs import digest

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workunits._cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.timeout(180)
def test_a_backup_taken_mid_load_restores_elsewhere_and_resumes(tmp_path: Path) -> None:
    state, gate, size = tmp_path / "state", tmp_path / "gate", 2 * MIB
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.large_values_host", str(state), str(size), str(gate)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()
    try:
        assert host.stdout is not None
        work_id = json.loads(host.stdout.readline())["id"]
        with wu.connect(state) as client:
            eventually(lambda: client.get(work_id).progress == 0.5, timeout=60, what="checkpoint")

            def load() -> None:  # other clients keep the ledger busy during the copy
                with wu.connect(state) as busy:
                    while not stop.is_set():
                        busy.shell("true")

            loader = threading.Thread(target=load)
            loader.start()
            try:
                done = cli("backup", "--state", str(state), "--json", str(tmp_path / "copy"))
            finally:
                stop.set()
                loader.join(timeout=30)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["value_files"] == 2  # the spec and the last checkpoint
        assert report["transcripts"] >= 1
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=10)
    finally:
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)
        if host.stdout is not None:
            host.stdout.close()

    restored = tmp_path / "elsewhere" / "restored"
    restored.parent.mkdir()
    os.rename(tmp_path / "copy", restored)
    assert stat.S_IMODE(restored.stat().st_mode) == 0o700
    assert not (restored / "ledger.db-wal").exists()  # one self-contained file
    for path in (restored / "values").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with wu.Supervisor(restored, install_signal_handlers=False) as sup:
        assert work_id in sup.recovered["resumed"]
        gate.touch()
        answer = sup.result(work_id, timeout=60)
        record = sup.get(work_id)
    assert answer == {"attempt": 2, "spec": digest("s" * size), "n": 2, "blob": digest("b" * size)}
    assert record.output_path is not None
    assert record.output_path.startswith(str(restored))


def test_backup_refuses_a_destination_that_holds_files(tmp_path: Path) -> None:
    with wu.connect(tmp_path / "state", create=True) as client:
        client.shell("true")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "something").write_text("x")
    done = cli("backup", "--state", str(tmp_path / "state"), str(tmp_path / "dest"))
    assert done.returncode == 2  # a bad argument: nothing is wrong with the ledger
    assert "not an empty directory" in done.stderr


@pytest.mark.parametrize(
    ("dest", "said"),
    [
        ("missing/dir/x", "missing/dir does not exist; create it"),
        ("a-file", "exists and is not an empty directory"),
    ],
)
def test_backup_says_what_is_wrong_with_a_destination_in_one_line(
    tmp_path: Path, dest: str, said: str
) -> None:
    with wu.connect(tmp_path / "state", create=True) as client:
        client.shell("true")
    (tmp_path / "a-file").write_text("x")
    done = cli("backup", "--state", str(tmp_path / "state"), str(tmp_path / dest))
    assert done.returncode == 2
    assert said in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Errno" not in done.stderr
