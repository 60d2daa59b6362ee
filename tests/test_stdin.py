"""``stdin=True``: a unit's standard input is a pipe its supervisor holds, written by
``send_input(id, data, eof=False)`` in order (``supervisor/actor/unit_input.py``).

Real commands read it (``cat``, ``wc``, a ``read`` loop); what they print is
what reached them. The clients' and a unit's own ``send_input`` are tested in
``tests/http/test_client_parity.py`` and ``tests/test_child_verbs.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import workunits as wu
from tests.loop_guard import LoopGuard

pytestmark = pytest.mark.timeout(60)


def _output(sup: wu.Supervisor, handle: wu.WorkHandle) -> bytes:
    handle.wait(timeout=30)
    return b"".join(sup.stream(handle.id))


def test_a_command_reads_what_is_sent_in_order_then_end_of_file(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "s") as sup:
        cat = sup.shell("cat", stdin=True)
        assert cat.send_input("hello ")
        assert sup.send_input(cat.id, b"world\n")
        assert sup.send_input(cat.id, "", eof=True)  # Ctrl-D: cat reads end of file and exits
        record = cat.wait(timeout=30)
        assert record.status is wu.Status.COMPLETED
        assert _output(sup, cat) == b"hello world\n"
        assert sup.send_input(cat.id, "late") is False  # it has ended: nothing written


def test_more_than_a_pipe_holds_is_queued_and_written_as_the_command_reads(
    tmp_path: Path,
) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB: sixteen times what a pipe buffers
    with wu.Supervisor(tmp_path / "s") as sup:
        counter = sup.shell("sleep 0.3; wc -c", stdin=True)
        assert counter.send_input(data, eof=True)  # returns at once: the pipe is not read yet
        assert _output(sup, counter).split() == [str(len(data)).encode()]


def test_input_sent_before_the_command_starts_waits_for_it(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "s", concurrency={"shell": 1}) as sup:
        blocker = sup.shell("sleep 30")
        later = sup.shell("cat", stdin=True)
        assert later.get().status is wu.Status.PENDING
        assert later.send_input("queued while pending\n", eof=True)
        blocker.kill()
        assert _output(sup, later) == b"queued while pending\n"


def test_a_unit_without_stdin_and_a_closed_stdin_refuse_input(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "s") as sup:
        plain = sup.shell("sleep 30")
        with pytest.raises(wu.SpecError, match="not started with stdin=True"):
            plain.send_input("x")
        reader = sup.shell("cat; sleep 30", stdin=True)
        assert reader.send_input("once", eof=True)
        with pytest.raises(wu.SpecError, match="is closed"):
            reader.send_input("twice")
        with pytest.raises(wu.SpecError, match="data must be bytes or str"):
            sup.send_input(reader.id, 42)  # type: ignore[arg-type]
        with pytest.raises(wu.SpecError, match="stdin must be True or False"):
            sup.shell("cat", stdin="yes")  # type: ignore[arg-type]
        with pytest.raises(wu.UnknownWork):
            sup.send_input("b00000000", "x")
        plain.kill()
        reader.kill()


def test_the_end_of_a_unit_that_never_read_drops_what_waits(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "s") as sup:
        deaf = sup.shell("sleep 30", stdin=True)
        assert deaf.send_input(b"x" * (1 << 20))  # more than the pipe holds: the writer waits
        assert deaf.kill()
        assert deaf.wait(timeout=30).status is wu.Status.KILLED
        assert deaf.send_input("more") is False


def test_the_async_twin_writes_without_blocking_the_loop(guard: LoopGuard, tmp_path: Path) -> None:
    async def main() -> bytes:
        async with wu.Supervisor(tmp_path / "s", install_signal_handlers=False) as sup:
            cat = await sup.shell_async("cat", stdin=True)
            assert await sup.send_input_async(cat.id, "from the loop\n")
            assert await cat.send_input_async("", eof=True)
            await cat.wait_async(timeout=30)
            return b"".join([chunk async for chunk in cat.stream_async()])

    assert guard.run(main) == b"from the loop\n"
