"""An agent's capture: program order in the transcript, and the output cap held as it writes.

Every source of a unit's transcript (its ``sys.stdout``/``sys.stderr``, bytes
written to fds 1 and 2 by anything else, and its events) goes through one
writer with one sequence, so the transcript is in the order the unit produced
it (as seen by the capture: flushed writes); and that writer counts bytes, so
an output cap holds however fast the unit writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

import workunits as wu
from tests.cli.conftest import Run

PAIRS = 400
MIB = 1 << 20
KIB = 1 << 10

# -- bodies run in unit processes (module-level so they pickle by reference) ---


def interleave(pairs: int) -> list[list[Any]]:
    """stdout, stderr and events in an order that changes every round; returns that order."""
    ctx = wu.current()
    produced: list[list[Any]] = []
    for i in range(pairs):
        steps = ["out", "err", "emit"] if i % 2 == 0 else ["emit", "err", "out"]
        if i % 3 == 0:
            steps.reverse()
        for step in steps:
            if step == "out":
                print(f"out {i}", flush=True)
                produced.append(["stdout", f"out {i}"])
            elif step == "err":
                print(f"err {i}", file=sys.stderr, flush=True)
                produced.append(["stderr", f"err {i}"])
            else:
                ctx.emit({"i": i})
                produced.append(["event", i])
    return produced


def descriptors_then_emits(rounds: int) -> list[list[Any]]:
    """Writes that bypass sys.stdout (a subprocess, os.write) still land before a later emit."""
    ctx = wu.current()
    produced: list[list[Any]] = []
    for i in range(rounds):
        if i % 2 == 0:
            subprocess.run([sys.executable, "-c", f"print('sub {i}')"], check=True)
        else:
            os.write(1, f"raw {i}\n".encode())
        produced.append(["stdout", f"{'sub' if i % 2 == 0 else 'raw'} {i}"])
        ctx.emit({"i": i})
        produced.append(["event", i])
        print(f"after {i}")
        produced.append(["stdout", f"after {i}"])
    return produced


def last_words() -> None:
    print("last words before os._exit")
    print("and on stderr", file=sys.stderr)
    os._exit(3)


def flood(how: str, total: int) -> None:
    """Write ``total`` bytes as fast as ``how`` allows, then return normally."""
    chunk = "x" * (64 * KIB - 1) + "\n"
    ctx = wu.current()
    for _ in range(total // len(chunk)):
        if how == "stdout":
            sys.stdout.write(chunk)
        elif how == "stderr":
            sys.stderr.write(chunk)
        elif how == "fd":
            os.write(1, chunk.encode())
        else:
            ctx.emit({"data": chunk})
    sys.stdout.flush()


def flood_the_transcript_itself(total: int) -> None:
    """A hostile unit: writes straight into its transcript, past the capture, then waits."""
    transcript = next(
        fd for fd, target in open_files() if target.endswith(f"{wu.current().id}.jsonl")
    )
    line = b'{"type":"stdout","data":"' + b"y" * (64 * KIB) + b'"}\n'
    for _ in range(total // len(line)):
        os.write(transcript, line)
    threading.Event().wait()  # the supervisor's size check kills us


def open_files() -> list[tuple[int, str]]:
    """This process's descriptors and what they name.

    The listing holds the descriptor that read it, closed by the time it is
    looked at: it (or any other gone meanwhile) is left out.
    """
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            found.append((int(fd.name), os.readlink(fd)))
        except FileNotFoundError:
            continue
    return found


# -- helpers ---------------------------------------------------------------------


@pytest.fixture
def run(state_dir: Path) -> Run:
    """The CLI on the supervisor's own state dir."""
    return Run(state_dir)


def transcript_of(state_dir: Path, work_id: str) -> Path:
    return state_dir / "transcripts" / f"{work_id}.jsonl"


def events_of(state_dir: Path, work_id: str) -> list[dict[str, Any]]:
    data = transcript_of(state_dir, work_id).read_bytes()
    return [orjson.loads(line) for line in data.splitlines()]


def as_produced(events: list[dict[str, Any]]) -> list[list[Any]]:
    """The transcript as the body's own record: one entry per line of output, per event."""
    seen: list[list[Any]] = []
    text: list[str] = []  # a stream's text until something else comes (a writer may split a line)
    for event, following in zip(events, [*events[1:], None], strict=True):
        if event["type"] in ("stdout", "stderr"):
            text.append(event["data"])
            if following is None or following["type"] != event["type"]:
                seen.extend([event["type"], line] for line in "".join(text).splitlines())
                text = []
        elif event["type"] == "event":
            seen.append(["event", event["data"]["i"]])
    return seen


def rendered(produced: list[list[Any]]) -> list[str]:
    lines = []
    for kind, value in produced:
        if kind == "stdout":
            lines.append(value)
        elif kind == "stderr":
            lines.append(f"[stderr] {value}")
        else:
            lines.append(f'[event] {{"i":{value}}}')
    return lines


# -- order -------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_prints_to_stdout_and_stderr_and_emits_keep_program_order(
    sup: wu.Supervisor, state_dir: Path
) -> None:
    h = sup.agent(interleave, PAIRS)
    produced = sup.result(h.id, timeout=50)
    events = events_of(state_dir, h.id)
    assert as_produced(events) == produced
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


@pytest.mark.timeout(60)
def test_tail_and_tail_follow_render_in_program_order(
    sup: wu.Supervisor, state_dir: Path, run: Run
) -> None:
    h = sup.agent(interleave, PAIRS)
    produced = sup.result(h.id, timeout=50)
    for args in (["tail"], ["tail", "-f"]):
        out = run(*args, h.id).stdout.splitlines()
        framing = ("[start]", "[result]", "[end]")
        body = [line for line in out if not line.startswith(framing)]
        assert body == rendered(produced), args


@pytest.mark.timeout(60)
def test_output_that_bypasses_sys_stdout_lands_before_a_later_event(
    sup: wu.Supervisor, state_dir: Path
) -> None:
    h = sup.agent(descriptors_then_emits, 40)
    produced = sup.result(h.id, timeout=50)
    assert as_produced(events_of(state_dir, h.id)) == produced


@pytest.mark.timeout(60)
def test_a_line_printed_just_before_a_hard_exit_is_in_the_transcript(
    sup: wu.Supervisor, state_dir: Path
) -> None:
    h = sup.agent(last_words)
    record = sup.wait(h.id, timeout=50)
    assert record.exit_code == 3
    seen = as_produced(events_of(state_dir, h.id))
    assert seen == [["stdout", "last words before os._exit"], ["stderr", "and on stderr"]]


# -- the output cap ------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["stdout", "stderr", "fd", "emit"])
def test_a_fast_writer_is_stopped_at_its_output_cap_and_killed(
    sup: wu.Supervisor, state_dir: Path, how: str
) -> None:
    cap = 1 * MIB
    # 40 MiB takes a fraction of a second: long before a once-a-second check.
    h = sup.agent(flood, how, 40 * MIB, output_cap=cap)
    record = sup.wait(h.id, timeout=50)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.OUTPUT_CAP), record
    data = transcript_of(state_dir, h.id).read_bytes()
    *kept, end = data.splitlines(keepends=True)
    assert sum(map(len, kept)) <= cap
    assert len(data) <= cap + 64 * KIB
    assert orjson.loads(end)["type"] == "end"
    assert orjson.loads(end)["reason"] == "output-cap"
    assert all(isinstance(orjson.loads(line), dict) for line in kept)


@pytest.mark.timeout(60)
def test_a_unit_writing_its_transcript_directly_is_killed_and_cut_back_to_the_cap(
    sup: wu.Supervisor, state_dir: Path
) -> None:
    cap = 256 * KIB
    h = sup.agent(flood_the_transcript_itself, 4 * MIB, output_cap=cap)
    record = sup.wait(h.id, timeout=50)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.OUTPUT_CAP), record
    data = transcript_of(state_dir, h.id).read_bytes()
    *kept, end = data.splitlines(keepends=True)
    assert sum(map(len, kept)) <= cap
    assert orjson.loads(end)["type"] == "end"
