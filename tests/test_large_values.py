"""Large values by reference, in real processes (issue 15, item 2).

Arguments, results and checkpoints above 1 MiB live in files beside the
ledger (``values/``, 0600, each bound to its unit by the HMAC in its name);
the row keeps a reference. An agent that cannot resume keeps no arguments at
all. Its payload reaches the unit process in a memfd. The files survive a
SIGKILL of the supervisor and a resumed attempt reads them; expiry and gc
delete them and give the ledger's pages back to the file system.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from workunits._core.errors import LedgerTampered, UnknownWork
from workunits._ledger import Ledger

from .conftest import eventually
from .large_values_jobs import big_result, digest, resume_from_big_checkpoint, size_of

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def ledger_bytes(state: Path) -> int:
    return sum(
        (state / name).stat().st_size
        for name in ("ledger.db", "ledger.db-wal")
        if (state / name).exists()
    )


def value_files(state: Path) -> list[Path]:
    root = state / "values"
    return sorted(root.iterdir()) if root.exists() else []


@pytest.fixture
def host(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.timeout(120)
def test_a_large_argument_to_an_agent_that_cannot_resume_is_not_stored(tmp_path: Path) -> None:
    state = tmp_path / "state"
    data = os.urandom(16 * MIB)
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        warm = sup.agent(size_of, b"")
        assert sup.result(warm.id, timeout=60) == 0
        before = ledger_bytes(state)
        unit = sup.agent(size_of, data)  # bytes are no JSON: pickled, so it cannot resume
        assert sup.result(unit.id, timeout=60) == len(data)
        grown = ledger_bytes(state) - before
        assert grown < MIB, f"the ledger grew by {grown} bytes"
        assert value_files(state) == []
    with Ledger(state) as ledger:
        with pytest.raises(UnknownWork, match=r"cannot resume.*not kept"):
            ledger.units.load_spec(unit.id)
        assert ledger.units.require(unit.id).spec_hash  # a keyed resubmit still compares


@pytest.mark.timeout(120)
def test_a_large_result_is_a_file_that_another_process_reads_and_tampering_is_refused(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        unit = sup.agent(big_result, 3 * MIB)
        assert sup.result(unit.id, timeout=60) == "r" * (3 * MIB)
    (path,) = value_files(state)
    assert path.name.startswith(f"{unit.id}.result.")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "values").stat().st_mode) == 0o700
    assert ledger_bytes(state) < 2 * MIB
    with wu.connect(state) as client:
        assert client.result(unit.id, timeout=10) == "r" * (3 * MIB)
    path.write_bytes(b'"' + b"x" * (3 * MIB) + b'"')  # same size, other bytes
    with Ledger(state) as ledger, pytest.raises(LedgerTampered, match=unit.id):
        ledger.units.require(unit.id)


@pytest.mark.timeout(180)
def test_a_large_spec_and_checkpoint_survive_a_sigkill_and_the_next_attempt_reads_them(
    tmp_path: Path, host: list[subprocess.Popen[str]]
) -> None:
    state, gate, size = tmp_path / "state", tmp_path / "gate", 2 * MIB
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.large_values_host", str(state), str(size), str(gate)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    host.append(proc)
    assert proc.stdout is not None
    work_id = json.loads(proc.stdout.readline())["id"]
    with wu.connect(state) as client:
        eventually(lambda: client.get(work_id).progress == 0.5, timeout=60, what="checkpoints")
    names = sorted(p.name.split(".")[1] for p in value_files(state))
    assert names == ["checkpoint", "spec"]  # the first checkpoint's file went with it
    for path in value_files(state):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ledger_bytes(state) < 2 * MIB
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        assert sup.recovered["resumed"] == [work_id]
        gate.touch()
        answer = sup.result(work_id, timeout=60)
        assert answer == {
            "attempt": 2,
            "spec": digest("s" * size),
            "n": 2,
            "blob": digest("b" * size),
        }
        # The same call under its key finds the unit, spec and all.
        again = sup.agent(resume_from_big_checkpoint, "s" * size, str(gate), key="big")
        assert again.id == work_id
        assert sup.gc(older_than=0) >= 0
    with Ledger(state) as ledger:
        ledger.retention.expire_ended_before(float("inf"))
        ledger.retention.gc(older_than=0)
    assert value_files(state) == []


@pytest.mark.timeout(120)
def test_gc_gives_the_ledger_s_space_back_to_the_file_system(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        units = [sup.agent(big_result, 900 * 1024) for _ in range(12)]  # kept in the ledger
        for unit in units:
            sup.result(unit.id, timeout=60)
    with Ledger(state) as ledger:
        ledger._db.give_back_space()  # the WAL out of the picture: only pages count
        full = (state / "ledger.db").stat().st_size
        assert full > 10 * MIB
        expired, freed = ledger.retention.expire_ended_before(float("inf"))
        assert expired == len(units)
        assert freed >= 12 * 900 * 1024
        ledger.retention.gc(older_than=0)
    assert (state / "ledger.db").stat().st_size < MIB
    assert ledger_bytes(state) < 2 * MIB


@pytest.mark.timeout(60)
def test_a_value_file_named_for_another_unit_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        one = sup.agent(big_result, 2 * MIB)
        two = sup.agent(big_result, 2 * MIB)
        sup.result(one.id, timeout=60)
        sup.result(two.id, timeout=60)
    with Ledger(state) as ledger:
        theirs = ledger.units.get(two.id)
        assert theirs is not None
        assert theirs.result is not None
        with ledger._db.write(durable=False) as conn:
            conn.execute(
                "UPDATE units SET result_file = (SELECT result_file FROM units WHERE id = ?) "
                "WHERE id = ?",
                (two.id, one.id),
            )
        with pytest.raises(LedgerTampered, match="another unit"):
            ledger.units.require(one.id)
