"""Output on disk, offset in memory (invariants 6 and 7): deltas, streams, the final drain."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.helpers import WAIT, read_until
from workunits import SpecError, Status, Supervisor
from workunits._core.record import TAIL_BYTES
from workunits.testing import ScriptedDriver


def test_read_output_returns_the_delta_and_advances_the_offset(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    assert msup.read_output(unit.id) == b""
    drive.write(unit.id, b"abc")
    assert msup.read_output(unit.id) == b"abc"
    assert msup.get(unit.id).output_offset == 3
    assert msup.read_output(unit.id) == b""
    drive.write(unit.id, b"defgh")
    assert msup.read_output(unit.id, max_bytes=2) == b"de"
    assert msup.get(unit.id).output_offset == 5
    assert msup.read_output(unit.id) == b"fgh"
    assert msup.get(unit.id).output_offset == 8


@pytest.mark.parametrize("max_bytes", [0, -1, 1.5, "10", True])
def test_read_output_refuses_a_bad_max_bytes(
    msup: Supervisor, drive: ScriptedDriver, max_bytes: object
) -> None:
    unit = drive.start()
    drive.write(unit.id, b"abc")
    with pytest.raises(SpecError):
        msup.read_output(unit.id, max_bytes=max_bytes)  # type: ignore[call-overload]
    assert msup.get(unit.id).output_offset == 0


def test_after_the_end_the_unread_rest_comes_from_the_tail(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    drive.write(unit.id, b"0123456789")
    assert msup.read_output(unit.id, max_bytes=4) == b"0123"
    record = drive.exit(unit.id, 0)
    assert record.output_bytes == 10
    assert record.output_tail == b"0123456789"
    assert msup.read_output(unit.id, max_bytes=3) == b"456"
    assert msup.read_output(unit.id) == b"789"
    assert msup.read_output(unit.id) == b""
    assert msup.get(unit.id).output_offset == 10


def test_a_reader_lagging_past_the_tail_resumes_at_the_tail_start(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    data = os.urandom(TAIL_BYTES + 1000)
    drive.write(unit.id, data)
    record = drive.exit(unit.id, 0)
    assert record.output_bytes == len(data)
    assert record.output_tail == data[-TAIL_BYTES:]
    assert msup.read_output(unit.id) == data[-TAIL_BYTES:]
    assert msup.get(unit.id).output_offset == len(data)


def test_the_output_file_exists_while_running_and_is_removed_at_the_end(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    path = msup.get(unit.id).output_path
    assert path is not None
    assert os.path.exists(path)
    drive.write(unit.id, b"x" * 10)
    assert os.path.getsize(path) == 10
    record = drive.exit(unit.id, 1)
    assert record.status == Status.FAILED
    assert not os.path.lexists(path)
    assert list(Path(path).parent.iterdir()) == []


def test_stream_yields_every_byte_once_including_the_final_drain(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    stream = msup.stream(unit.id)
    drive.write(unit.id, b"a")
    assert next(stream) == b"a"
    assert msup.get(unit.id).retain == 1, "an open stream retains its unit"
    drive.write(unit.id, b"b")
    drive.write(unit.id, b"c")
    assert next(stream) == b"bc"
    drive.write(unit.id, b"last words")
    drive.exit(unit.id, 0)
    assert list(stream) == [b"last words"]
    assert msup.get(unit.id).retain == 0, "a finished stream releases its unit"


def test_stream_keeps_everything_when_the_unit_ends_far_ahead_of_the_reader(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    stream = msup.stream(unit.id)
    drive.write(unit.id, b"<")
    assert next(stream) == b"<"
    body = os.urandom(4 * TAIL_BYTES + 123)
    for i in range(0, len(body), 10_000):
        drive.write(unit.id, body[i : i + 10_000])
    record = drive.exit(unit.id, 0)
    assert not os.path.lexists(record.output_path or ""), "the file is gone from the directory"
    assert b"".join(stream) == body
    assert msup.get(unit.id).output_offset == len(body) + 1


def test_stream_of_a_real_process_that_ends_mid_read(sup: Supervisor) -> None:
    lines = 3000
    unit = sup.shell(f"i=0; while [ $i -lt {lines} ]; do echo line-$i; i=$((i+1)); done")
    got = b"".join(sup.stream(unit.id))
    assert got == b"".join(b"line-%d\n" % i for i in range(lines))
    assert sup.get(unit.id).status == Status.COMPLETED


def test_stream_of_a_real_process_keeps_output_beyond_the_tail(
    sup: Supervisor, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    size = 5 * TAIL_BYTES
    unit = sup.shell(f"echo start; read go < {gate}; head -c {size} /dev/zero")
    stream = sup.stream(unit.id)
    first = next(stream)  # the stream has retained the unit from here on
    with open(gate, "w") as f:  # let the process write its burst and exit
        f.write("go\n")
    assert sup.wait(unit.id, WAIT).status == Status.COMPLETED
    rest = b"".join(stream)
    assert first + rest == b"start\n" + bytes(size)


def test_concurrent_streams_of_different_units_each_get_their_own_bytes(
    sup: Supervisor,
) -> None:
    units = [sup.shell(f"for i in 1 2 3 4 5; do echo {n}-$i; done") for n in range(4)]
    results: dict[str, bytes] = {}

    def consume(work_id: str) -> None:
        results[work_id] = b"".join(sup.stream(work_id))

    threads = [threading.Thread(target=consume, args=(u.id,)) for u in units]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    for n, unit in enumerate(units):
        assert results[unit.id] == b"".join(b"%d-%d\n" % (n, i) for i in range(1, 6))


def test_read_until_sees_output_of_a_running_process(sup: Supervisor) -> None:
    unit = sup.shell("echo one; echo two; exec sleep 30")
    assert read_until(sup, unit.id, b"two\n") == b"one\ntwo\n"
    assert sup.get(unit.id).status == Status.RUNNING
    sup.kill(unit.id)


def test_read_output_carries_on_from_its_offset_after_a_restart(tmp_path: Path) -> None:
    """Saved at stop as at an eviction: the next supervisor did not hand 'first' again."""
    state = tmp_path / "state"
    with Supervisor(state, install_signal_handlers=False) as sup:
        unit = sup.shell(["printf", "first\\nsecond\\n"])
        sup.wait(unit.id, WAIT)
        assert sup.read_output(unit.id, max_bytes=6) == b"first\n"
    with Supervisor(state, install_signal_handlers=False) as sup:
        assert sup.read_output(unit.id) == b"second\n"
        assert sup.read_output(unit.id) == b""
