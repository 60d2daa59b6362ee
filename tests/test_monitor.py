"""Monitors (``m``): matching lines become rate-limited events; a monitor ends with its source."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import workunits as wu
from workunits._unit.ratelimit import TokenBucket

from .conftest import alive, eventually
from .kinds_support import (
    Fifo,
    descendants,
    read_line,
    supervisor,
    take_until_end,
    wait_until,
    write_line,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[wu.Supervisor]:
    with supervisor(tmp_path) as s:
        yield s


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Fifo]:
    fifo = Fifo(tmp_path / "gate")
    yield fifo
    fifo.close()


def split(items: list[wu.MailboxItem]) -> tuple[list[wu.MonitorEvent], list[wu.Notification]]:
    events = [i for i in items if isinstance(i, wu.MonitorEvent)]
    notices = [i for i in items if isinstance(i, wu.Notification)]
    return events, notices


def numbered(n: int, word: str = "ERROR") -> Any:
    def lines() -> Iterator[str]:
        for i in range(n):
            yield f"{i} {word}"

    return lines


# -- matching, ending, the one notification ------------------------------------------


def test_a_commands_matching_lines_become_events_then_one_notification(
    sup: wu.Supervisor,
) -> None:
    script = "for i in 1 2 3 4; do echo line $i ok; echo line $i ERROR >&2; done; exit 3"
    m = sup.monitor(script, r"ERROR$", rate_limit=None)
    assert m.id.startswith("m")
    events, notices = split(take_until_end(sup.notifications(), m.id))
    assert [e.line for e in events] == [f"line {i} ERROR" for i in range(1, 5)]
    assert all(e.id == m.id and e.suppressed == 0 and e.at > 0 for e in events)
    assert [n.id for n in notices] == [m.id]  # exactly one terminal notice, after every event
    assert notices[0].status == wu.Status.COMPLETED  # the source ended: completed
    assert m.result(timeout=10) == {"lines": 8, "matches": 4, "events": 4, "exit_code": 3}
    assert sup.get(m.id).kind == "monitor"


def test_a_callable_source_and_a_compiled_pattern(sup: wu.Supervisor) -> None:
    def source() -> Iterator[str | bytes]:
        yield "Disk FULL"
        yield b"disk full\n"
        yield "all good"

    m = sup.monitor(source, re.compile("disk full", re.IGNORECASE), description="disks")
    events, _ = split(take_until_end(sup.notifications(), m.id))
    assert [e.line for e in events] == ["Disk FULL", "disk full"]
    assert sup.get(m.id).description == "disks"


def test_the_rate_limit_counts_what_it_drops_and_keeps_the_newest(sup: wu.Supervisor) -> None:
    started = time.monotonic()
    m = sup.monitor(numbered(200), "ERROR", rate_limit=5)
    events, _ = split(take_until_end(sup.notifications(), m.id))
    elapsed = time.monotonic() - started
    # The bucket's 5 tokens, what it refilled meanwhile, and the held newest line at the end.
    assert len(events) <= 5 + 5 * elapsed + 1
    assert sum(1 + e.suppressed for e in events) == 200  # every match is an event or counted
    assert events[-1].line == "199 ERROR"  # the newest match is never lost
    assert events[-1].suppressed > 0


def test_a_line_longer_than_a_read_is_one_line_matched_on_its_start(sup: wu.Supervisor) -> None:
    """Its rest is not a line of its own: an anchored pattern matches no middle of a line."""
    script = "head -c 70000 /dev/zero | tr '\\0' x; echo 'ERROR mid'; echo 'ERROR start'"
    m = sup.monitor(script, r"^ERROR", rate_limit=None)
    events, _ = split(take_until_end(sup.notifications(), m.id))
    assert [e.line for e in events] == ["ERROR start"]
    assert m.result(timeout=10)["lines"] == 2


def test_a_rate_of_one_event_in_ages_holds_the_rest_without_failing(sup: wu.Supervisor) -> None:
    m = sup.monitor(numbered(3), "ERROR", rate_limit=1e-12)
    events, _ = split(take_until_end(sup.notifications(), m.id))
    assert [e.line for e in events] == ["0 ERROR", "2 ERROR"]  # the newest, at the end
    assert sum(1 + e.suppressed for e in events) == 3  # every match an event or counted
    assert sup.wait(m.id, timeout=10).status == wu.Status.COMPLETED


def bursts_then_waits(gate: str) -> Iterator[str]:
    for i in range(25):
        yield f"burst {i}"
    read_line(gate)  # the source goes quiet but does not end
    yield "after"


def test_a_held_line_goes_out_when_the_bucket_refills(sup: wu.Supervisor, gate: Fifo) -> None:
    m = sup.monitor(lambda: bursts_then_waits(gate.path), "burst|after", rate_limit=20)
    mailbox = sup.notifications()
    lines: list[str] = []
    while "burst 24" not in lines:  # arrives while the source is still quiet and running
        item = mailbox.get(timeout=10)
        assert isinstance(item, wu.MonitorEvent), item
        lines.append(item.line)
    assert sup.get(m.id).status == wu.Status.RUNNING
    gate.send()
    events, _ = split(take_until_end(mailbox, m.id))
    assert [e.line for e in events] == ["after"]
    assert m.result(timeout=10)["matches"] == 26


def test_a_source_that_raises_fails_the_monitor(sup: wu.Supervisor) -> None:
    def source() -> Iterator[str]:
        yield "one"
        raise OSError("log rotated away")

    m = sup.monitor(source, ".")
    record = m.wait(timeout=10)
    assert record.status == wu.Status.FAILED
    assert record.error is not None
    assert "OSError: log rotated away" in record.error


def test_a_source_that_yields_neither_str_nor_bytes_fails_with_wrong_type(
    sup: wu.Supervisor,
) -> None:
    def source() -> Iterator[object]:
        yield 42

    m = sup.monitor(source, ".")  # type: ignore[arg-type]
    with pytest.raises(wu.WorkFailed) as failed:
        m.result(timeout=10)
    assert isinstance(failed.value.__cause__, wu.WrongType)
    assert isinstance(failed.value.__cause__, TypeError)
    assert "a monitor's source yields str or bytes, got int" in str(failed.value)


def test_a_command_that_cannot_start_fails_the_monitor(sup: wu.Supervisor) -> None:
    record = sup.monitor(["/no/such/program"], ".").wait(timeout=10)
    assert record.status == wu.Status.FAILED
    assert record.error is not None
    assert "FileNotFoundError" in record.error


def _dead(pid: int) -> bool:
    return not alive(pid)


# -- ending early --------------------------------------------------------------------


def test_kill_takes_the_monitor_and_its_command(sup: wu.Supervisor) -> None:
    m = sup.monitor("echo ready; exec sleep 600", "ready")
    event = sup.notifications().get(timeout=10)
    assert isinstance(event, wu.MonitorEvent)
    assert event.line == "ready"
    pid = eventually(lambda: sup.get(m.id).pid, what="the monitor's pid")
    below = descendants(pid)
    assert below, "the command runs below the monitor's process"
    assert m.kill() is True
    record = m.wait(timeout=10)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
    for p in [pid, *below]:
        wait_until(partial(_dead, p), what=f"process {p} of a killed monitor is gone")


def test_cancel_stops_a_quiet_monitor_without_waiting_for_the_grace(
    sup: wu.Supervisor, gate: Fifo
) -> None:
    def quiet() -> Iterator[str]:
        yield "started"
        read_line(gate.path)

    m = sup.monitor(quiet, "started")
    assert isinstance(sup.notifications().get(timeout=10), wu.MonitorEvent)
    assert m.cancel(grace=60) is True
    record = m.wait(timeout=10)  # far inside the grace: the loop saw the cancel itself
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
    assert record.signal is None


# -- a monitor started by a unit ------------------------------------------------------


def watcher(count: int) -> list[Any]:
    ctx = wu.current()
    m = ctx.monitor(numbered(count, "hit"), "hit", rate_limit=None)
    inbox = ctx.notifications()
    got: list[Any] = []
    while True:
        item = inbox.get(timeout=10)
        if isinstance(item, wu.MonitorEvent):
            got.append(item.line)
        elif isinstance(item, wu.Notification):
            got.append((item.id == m.id, item.status.value))
            return got


def test_a_units_monitor_sends_events_into_the_units_mailbox(sup: wu.Supervisor) -> None:
    a = sup.agent(watcher, 3)
    assert a.result(timeout=20) == ["0 hit", "1 hit", "2 hit", (True, "completed")]
    items = take_until_end(sup.notifications(), a.id)
    assert [type(i) for i in items] == [wu.Notification]  # none of the events leaked up here


# -- asyncio and bad input ------------------------------------------------------------


def test_async_for_over_the_mailbox_leaves_the_loop_running(
    sup: wu.Supervisor, gate: Fifo, tmp_path: Path
) -> None:
    said = Fifo(tmp_path / "said")

    def waits_then_speaks() -> Iterator[str]:
        write_line(said.path, "waiting")
        yield read_line(gate.path)

    m = sup.monitor(waits_then_speaks, "go")

    async def release() -> None:
        await asyncio.to_thread(said.wait)
        gate.send("go on")  # runs only while `async for` below yields the loop

    async def main() -> list[str]:
        releaser = asyncio.create_task(release())
        seen: list[str] = []
        async for item in sup.notifications():
            if isinstance(item, wu.MonitorEvent | wu.Notification):
                seen.append(item.line if isinstance(item, wu.MonitorEvent) else item.status.value)
            if isinstance(item, wu.Notification) and item.id == m.id:
                break
        await releaser
        return seen

    assert asyncio.run(main()) == ["go on", "completed"]
    said.close()


@pytest.mark.parametrize(
    ("source", "pattern", "rate", "message"),
    [
        ("tail -f log", "(unclosed", 10.0, "not a valid regex"),
        ("tail -f log", re.compile(b"bytes"), 10.0, "str pattern"),
        ("tail -f log", "x", 0, "rate_limit"),
        ("tail -f log", "x", float("inf"), "rate_limit"),
        (42, "x", 10.0, "cmd must be"),
        ("", "x", 10.0, "empty"),
    ],
)
def test_bad_monitor_arguments_are_spec_errors(
    sup: wu.Supervisor, source: Any, pattern: Any, rate: Any, message: str
) -> None:
    with pytest.raises(wu.SpecError, match=message):
        sup.monitor(source, pattern, rate_limit=rate)
    assert sup.list(kind="monitor") == []  # nothing was registered


def test_the_token_bucket() -> None:
    bucket = TokenBucket(rate=2.0, burst=3.0, now=100.0)
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.next_at(100.0) == pytest.approx(100.5)
    assert bucket.take(100.5) is True
    assert bucket.take(100.5) is False
    assert bucket.take(110.0)
    assert bucket.take(110.0)
    assert bucket.take(110.0)
    assert bucket.take(110.0) is False
