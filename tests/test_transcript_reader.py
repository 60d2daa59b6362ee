"""The public transcript reader, which ``workunits tail`` uses; a cancel reads as a cancel."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import workunits as wu
from tests import deploy_jobs
from tests.conftest import eventually
from workunits._cli import cli

pytestmark = pytest.mark.timeout(120)


def chatty() -> int:
    ctx = wu.current()
    print("hello")
    ctx.progress(0.5, "half way")
    ctx.emit({"found": 3})
    return 7


def test_an_agents_transcript_is_read_as_events_and_rendered_as_tail_prints_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        handle = sup.agent(chatty)
        handle.wait(timeout=30)
        events = list(wu.read_transcript(sup.stream(handle.id)))
    types = [e.type for e in events]
    assert types[0] == "start"
    assert types[-1] == "end"
    assert {"stdout", "progress", "event", "result"} <= set(types)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    (result,) = [e for e in events if e.type == "result"]
    assert result.fields["value"] == 7
    path = state / "transcripts" / f"{handle.id}.jsonl"
    lines = list(wu.render_transcript(path))
    assert "hello" in lines
    assert "[progress]  50% half way" in lines
    assert '[event] {"found":3}' in lines
    assert lines[-1] == "[end] completed"
    shown = CliRunner().invoke(cli, ["tail", handle.id, "--state", str(state)])
    assert shown.exit_code == 0
    assert shown.stdout.splitlines() == lines  # the CLI prints what the reader renders


def test_a_line_that_is_not_json_is_a_text_event(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"seq":1,"ts":1.0,"type":"start","id":"a1","attempt":1,"pid":9}\nnot json\n')
    events = list(wu.read_transcript(path))
    assert [(e.type, e.seq) for e in events] == [("start", 1), ("text", None)]
    assert events[1].render() == "not json"
    # Chunks cut anywhere read the same as the whole file.
    data = path.read_bytes()
    cut = [data[i : i + 5] for i in range(0, len(data), 5)]
    assert list(wu.read_transcript(cut)) == events


def test_a_cooperatively_cancelled_agent_ends_cancelled_not_exit_code_1(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        handle = sup.agent(deploy_jobs.count_with_checkpoints, str(tmp_path / "never"))
        with wu.connect(state) as client:
            eventually(lambda: client.row(handle.id).checkpoint is not None, what="a checkpoint")
        assert sup.cancel(handle.id)
        record = sup.wait(handle.id, timeout=30)
    assert (record.status, record.reason, record.exit_code) == (
        wu.Status.KILLED,
        wu.Reason.CANCELLED,
        None,
    )
    assert record.describe_end() == "reason cancelled"
    events = list(wu.read_transcript(state / "transcripts" / f"{handle.id}.jsonl"))
    assert "error" not in [e.type for e in events]  # a cancel asked for is no failure
    assert [e.render() for e in events[-2:]] == [
        "[cancelled] stopped where the cancel was asked for",
        "[end] killed (cancelled)",
    ]
