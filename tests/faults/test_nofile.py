"""Descriptor exhaustion: with a low RLIMIT_NOFILE new units fail clearly, the rest carry on.

The supervisor runs in its own process (``tests.faults.nofile_host``) so the
low limit (soft and hard: the Supervisor raises soft to hard) touches nothing
else. Units that cannot get a descriptor end ``failed`` naming EMFILE; those
already running complete; the supervisor answers throughout and starts units
again once descriptors are free.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

LIMIT = 256


@pytest.fixture
def host(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.faults.nofile_host",
            str(tmp_path / "state"),
            str(tmp_path / "gate"),
            str(LIMIT),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_out_of_descriptors_new_units_fail_clearly_and_the_rest_carry_on(
    host: subprocess.Popen[str],
) -> None:
    out, err = host.communicate(timeout=100)
    assert host.returncode == 0, err[-4000:]
    report = json.loads(out)
    assert report["submit_errors"] == []
    others = report["others"]
    assert len(others) >= 5, report
    for status, error in others:
        assert status == "failed"
        assert "Too many open files" in error or "out of file descriptors" in error, error
    # Everything that got its descriptors ran to the end.
    assert report["completed"] == report["units"] - len(others)
    assert report["completed"] > LIMIT // 2
    assert report["answered_running"] >= report["completed"] - len(others)
    assert report["after"] == "completed"


@pytest.mark.parametrize("containment", ["auto", "subreaper"])
@pytest.mark.timeout(90)
def test_the_supervisor_raises_its_descriptor_limit_and_units_start_with_the_old_one(
    tmp_path: Path, containment: str
) -> None:
    """Thousands of units need descriptors in the supervisor, but a unit that uses
    ``select()`` breaks past descriptor 1,023: the raise is the supervisor's alone."""
    soft = 300
    env = {**os.environ, "WORKUNITS_CONTAINMENT": containment}
    done = subprocess.run(
        [sys.executable, "-m", "tests.faults.nofile_units_host", str(tmp_path / "s"), str(soft)],
        capture_output=True,
        text=True,
        timeout=80,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    sup_soft, hard = report["supervisor"]
    if hard <= soft:
        pytest.skip(f"the hard RLIMIT_NOFILE ({hard}) leaves nothing to raise")
    assert sup_soft == hard
    assert any("raised the soft RLIMIT_NOFILE from 300" in line for line in report["log"])
    # Forked (agent) or spawned (shell, under a keeper or not): the old soft limit,
    # and the variable that carried it is not in the unit's environment.
    assert report["agent"] == [soft, hard]
    assert report["shell"] == [str(soft), "unset"]


@pytest.mark.timeout(120)
def test_a_zygote_start_that_runs_out_of_descriptors_fails_no_unit_but_its_own(
    tmp_path: Path,
) -> None:
    """Units submitted at once all wait for the zygote's first start; when it meets
    EMFILE, each of them tries a start of its own rather than fail with that one."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.faults.nofile_start_host",
            str(tmp_path / "state"),
            str(tmp_path / "gate"),
            "64",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["started"] >= 1, report  # all 40 failed with the one start's error
    for failure in report["failures"]:
        assert "Too many open files" in failure or "EMFILE" in failure, failure
