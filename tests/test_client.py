"""wu.connect(): the client works units through the ledger, with or without a supervisor.

The supervisor's half of the contract is played by ``FakeSupervisor``, so each
step (adopt, output, end, apply a request) happens exactly when the test says.
End-to-end runs against a real ``workunits serve`` are in tests/cli.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests.client_support import FakeSupervisor
from tests.conftest import eventually
from tests.ledger.support import new_unit
from workunits._core.status import Reason, Status
from workunits._ledger import LedgerVersionError
from workunits._ledger.sqlite.schema import SCHEMA_VERSION

WAIT = 10.0


@pytest.fixture
def client(state_dir: Path) -> Iterator[wu.Client]:
    with wu.connect(state_dir) as opened:
        yield opened


@pytest.fixture
def fake(client: wu.Client) -> Iterator[FakeSupervisor]:
    supervisor = FakeSupervisor(client.state_dir)
    yield supervisor
    supervisor.close()


class Background:
    """Runs one call in a thread; ``outcome()`` joins it (bounded) and returns or raises."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self._thread.start()

    def _run(self, fn: Any, *args: Any) -> None:
        self.started.set()
        try:
            self._value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self._error = exc

    def outcome(self) -> Any:
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "the call did not return"
        if self._error is not None:
            raise self._error
        return self._value

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()


def add(a: int, b: int) -> int:
    return a + b


# -- connecting ------------------------------------------------------------------


def test_connect_creates_the_state_dir_and_its_ledger(tmp_path: Path) -> None:
    state = tmp_path / "new" / "state"
    with wu.connect(state) as client:
        assert client.state_dir == state
        assert (state / "ledger.db").is_file()
        assert client.list() == []
    assert client.closed


def test_connect_without_create_refuses_a_dir_with_no_ledger_and_creates_nothing(
    tmp_path: Path,
) -> None:
    state = tmp_path / "typo"
    with pytest.raises(wu.NoLedger, match="no workunits ledger"):
        wu.connect(state, create=False)
    assert not state.exists()


def test_connect_refuses_a_ledger_of_a_newer_schema(state_dir: Path) -> None:
    wu.connect(state_dir).close()
    conn = sqlite3.connect(state_dir / "ledger.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(LedgerVersionError, match="newer workunits"):
        wu.connect(state_dir, create=False)


def test_a_closed_client_refuses_calls(state_dir: Path) -> None:
    client = wu.connect(state_dir)
    client.close()
    client.close()  # idempotent
    with pytest.raises(wu.ClientClosed):
        client.list()
    assert "closed" in repr(client)


# -- submitting ------------------------------------------------------------------


def test_shell_inserts_a_pending_row_the_supervisor_can_adopt(client: wu.Client) -> None:
    handle = client.shell("echo hi", description="greeting", timeout=30)
    assert handle.id.startswith("b")
    assert handle.created
    row = handle.row()
    assert row.status is Status.PENDING
    assert row.kind == "shell"
    assert row.description == "greeting"
    assert row.session is None
    assert row.output_path == str(client.state_dir / "output" / f"{handle.id}.out")
    assert (row.max_attempts, row.resumable) == (1, False)
    spec = client.ledger.units.load_spec(handle.id)
    assert spec == {
        "argv": ["/bin/sh", "-c", "echo hi"],
        "cwd": None,
        "env": None,
        "output_cap": 5 * 1024**3,
        "on_lost": "fail",
        "timeout": 30,
    }


def test_shell_description_defaults_to_the_command(client: wu.Client) -> None:
    assert client.shell(["ls", "-l", "a b"]).get().description == "ls -l 'a b'"


def test_a_shell_that_restarts_when_lost_is_resumable(client: wu.Client) -> None:
    row = client.shell("make", on_lost="restart").row()
    assert (row.max_attempts, row.resumable) == (3, True)


def test_agent_by_reference_is_stored_as_a_reference_and_resumable(client: wu.Client) -> None:
    handle = client.agent("tests.test_client:add", 1, b=2, key="job-1")
    row = handle.row()
    assert handle.id.startswith("a")
    assert row.kind == "agent"
    assert row.description == "tests.test_client:add"
    assert row.spec is not None
    assert row.spec.format == "ref"
    assert (row.max_attempts, row.resumable) == (3, True)
    assert client.agent(add, 1, b=2, key="job-1").id == handle.id  # the same spec


def test_agent_of_a_lambda_is_pickled_and_not_resumable(client: wu.Client) -> None:
    row = client.agent(lambda: 1, max_attempts=2).row()
    assert row.spec is not None
    assert row.spec.format == "pickle"
    assert (row.max_attempts, row.resumable) == (2, False)


def test_the_same_key_returns_the_existing_unit_whatever_its_status(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    first = client.shell("true", key="k")
    fake.start(first.id)
    fake.complete(first.id)
    again = client.shell("true", key="k")
    assert again.id == first.id
    assert not again.created
    assert "existing" in repr(again)


def test_the_same_key_with_other_arguments_conflicts(client: wu.Client) -> None:
    client.shell("true", key="k")
    with pytest.raises(wu.IdempotencyConflict, match="other arguments"):
        client.shell("false", key="k")
    with pytest.raises(wu.IdempotencyConflict):
        client.agent("tests.test_client:add", 1, 2, key="k")
    assert len(client.list()) == 1


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda c: c.shell(""), "empty"),
        (lambda c: c.shell("true", timeout=0), "timeout"),
        (lambda c: c.shell("true", key=""), "key"),
        (lambda c: c.shell("true", on_lost="retry"), "on_lost"),
        (lambda c: c.shell("true", description=3), "description"),
        (lambda c: c.agent("not a reference"), "import reference"),
        (lambda c: c.agent("json:dumps", (1, 2)), "exact JSON"),
        (lambda c: c.agent("json:dumps", 1, n=2**64), r"at \$\['kwargs'\]\['n'\]: .* 64 bits"),
        (lambda c: c.agent("json:dumps", [float("inf")]), r"at \$\['args'\]\[0\]\[0\]: inf"),
        (lambda c: c.agent("json:dumps", memory_limit=-1), "memory_limit"),
        (lambda c: c.agent(add, 1, 2, max_attempts=0), "max_attempts"),
        (lambda c: c.agent(threading.Lock()), "callable"),
    ],
)
def test_bad_arguments_raise_spec_error_and_submit_nothing(
    client: wu.Client, call: Any, match: str
) -> None:
    with pytest.raises(wu.SpecError, match=match):
        call(client)
    assert client.list() == []


# -- reading ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda c, i: c.get(i),
        lambda c, i: c.row(i),
        lambda c, i: c.wait(i, 0),
        lambda c, i: c.result(i, 0),
        lambda c, i: c.cancel(i),
        lambda c, i: c.kill(i),
        lambda c, i: c.retain(i),
        lambda c, i: c.stream(i),
    ],
)
def test_malformed_and_unknown_ids_raise_the_documented_errors(
    client: wu.Client, call: Any
) -> None:
    with pytest.raises(wu.InvalidWorkId):
        call(client, "../etc/passwd")
    with pytest.raises(wu.UnknownWork, match="no unit b00000000"):
        call(client, "b00000000")


def test_list_filters_by_status_kind_and_parent(client: wu.Client, fake: FakeSupervisor) -> None:
    shell = client.shell("true")
    agent = client.agent(add, 1, 2)
    fake.start(shell.id)
    assert [r.id for r in client.list(status="running")] == [shell.id]
    assert [r.id for r in client.list(kind="agent")] == [agent.id]
    assert client.list(parent=shell.id) == []
    assert [r.id for r in client.rows(limit=1)] == [shell.id]
    with pytest.raises(wu.SpecError, match="not a status"):
        client.list(status="done")


def test_a_kind_is_named_or_lettered_and_a_typo_is_an_error_not_none(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    shell = client.shell("true")
    assert [r.id for r in client.list(kind="b")] == [shell.id]  # its letter
    assert client.list(kind="agent") == []  # built in: none yet
    with pytest.raises(wu.UnknownKind, match=r"no kind 'Shell': it is not built in \(agent, "):
        client.list(kind="Shell")
    with pytest.raises(wu.UnknownKind):
        client.rows(kind="scorer", status="completed")
    # A kind of the user's, known from its units' rows: no error, even when none matches.
    new_unit(fake.ledger, kind="scorer")
    assert [r.kind for r in client.list(kind="scorer")] == ["scorer"]
    assert client.list(kind="scorer", status="completed") == []


def test_an_expired_unit_reads_expired_and_its_result_is_a_clear_error(
    client: wu.Client, state_dir: Path
) -> None:
    fake = FakeSupervisor(state_dir, expire_after=0.0)
    try:
        handle = client.agent(add, 1, 2)
        fake.start(handle.id)
        fake.complete(handle.id, 3)
        assert fake.ledger.retention.expire() == 1
    finally:
        fake.close()
    assert handle.row().shown_status == "expired"
    assert handle.get().status is Status.COMPLETED  # the record keeps how it ended
    assert [r.id for r in client.list(status="expired")] == [handle.id]
    assert client.list(status="completed") == []
    with pytest.raises(wu.WorkExpired, match=f"{handle.id} has expired: it ended completed"):
        handle.result()
    with pytest.raises(wu.UnknownWork):  # WorkExpired is one
        handle.result()


# -- waiting and results ---------------------------------------------------------


def test_wait_times_out_with_not_finished(client: wu.Client) -> None:
    handle = client.shell("true")
    with pytest.raises(wu.NotFinished, match=r"still pending after 0\.05 s") as info:
        handle.wait(0.05)
    assert info.value.record.id == handle.id
    with pytest.raises(wu.SpecError, match="timeout"):
        handle.wait(-1)


def test_wait_blocks_until_the_unit_ends_then_returns_its_record(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("true")
    waiter = Background(handle.wait)
    waiter.started.wait(WAIT)
    assert not waiter.done
    fake.start(handle.id)
    fake.complete(handle.id)
    record = waiter.outcome()
    assert record.status is Status.COMPLETED
    assert record.exit_code == 0


def test_result_returns_the_value_and_a_shell_unit_its_record(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    agent = client.agent(add, 1, 2)
    nothing = client.agent(add, 0, 0)
    shell = client.shell("true")
    for work_id, value in ((agent.id, 3), (nothing.id, None)):
        fake.start(work_id)
        fake.complete(work_id, value)
    fake.start(shell.id)
    fake.complete(shell.id)
    assert agent.result() == 3
    assert nothing.result() is None
    record = shell.result()
    assert isinstance(record, wu.WorkRecord)
    assert record.exit_code == 0


def test_a_pickled_result_comes_back(client: wu.Client, fake: FakeSupervisor) -> None:
    handle = client.agent(add, 1, 2)
    fake.start(handle.id)
    fake.complete(handle.id, {1: (2, 3)})  # not JSON: stored as a signed pickle
    assert handle.result() == {1: (2, 3)}


def test_result_raises_for_failed_and_killed_units(client: wu.Client, fake: FakeSupervisor) -> None:
    failed = client.shell("false")
    killed = client.shell("sleep 9")
    fake.start(failed.id)
    fake.end(failed.id, Status.FAILED, exit_code=2)
    fake.start(killed.id)
    fake.end(killed.id, Status.KILLED, reason=Reason.KILLED)
    with pytest.raises(wu.WorkFailed, match="exit code 2"):
        failed.result()
    with pytest.raises(wu.WorkKilled, match="reason killed"):
        killed.result(timeout=1)
    with pytest.raises(wu.NotFinished):
        client.result(client.shell("true").id, timeout=0)


def test_close_ends_a_wait_in_another_thread(state_dir: Path) -> None:
    client = wu.connect(state_dir)
    handle = client.shell("true")
    waiter = Background(handle.wait)
    waiter.started.wait(WAIT)
    client.close()
    with pytest.raises(wu.ClientClosed):
        waiter.outcome()


# -- requests --------------------------------------------------------------------


def test_cancel_of_a_pending_unit_queues_a_request_that_ends_it_killed(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("sleep 9")
    assert handle.cancel(grace=1.5)
    (request,) = fake.apply_requests()
    assert (request.verb, request.target, request.args) == ("cancel", handle.id, {"grace": 1.5})
    record = handle.wait(0)
    assert (record.status, record.reason) == (Status.KILLED, Reason.CANCELLED)
    assert client.request_result(request.seq) == {"changed": True, "status": "killed"}


def test_cancel_and_kill_of_an_ended_unit_are_no_ops_without_a_request(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("true")
    fake.start(handle.id)
    fake.complete(handle.id)
    assert not handle.cancel()
    assert not handle.kill()
    assert fake.apply_requests() == []


def test_kill_goes_through_requests_and_retains_are_leases_in_the_ledger(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("sleep 9")
    fake.start(handle.id)
    with client.retain(handle.id, lease=60) as retain:
        assert client.ledger.retains.held([handle.id]) == {handle.id}
        assert retain.renew()
    assert client.ledger.retains.held([handle.id]) == set()
    assert not retain.renew()  # released: retain again to hold it
    assert handle.kill()
    verbs = [r.verb for r in fake.apply_requests()]
    assert verbs == ["kill"]
    assert handle.get().reason is Reason.KILLED


def test_request_result_is_none_until_a_supervisor_applies_it(client: wu.Client) -> None:
    seq = client.request("kill", client.shell("true").id)
    assert seq is not None
    assert client.request_result(seq, timeout=0.02) is None
    with pytest.raises(wu.SpecError, match="no request"):
        client.request_result(seq + 100)
    with pytest.raises(wu.SpecError, match="grace"):
        client.cancel(client.shell("true").id, grace=-1)


def test_supervisor_running_follows_the_state_dir_lock(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    assert not client.supervisor_running()
    fake.open_session()
    assert client.supervisor_running()
    fake.die()  # its session row stays open, as after a SIGKILL: the lock is what counts
    assert not client.supervisor_running()


# -- streaming output ------------------------------------------------------------


def test_stream_yields_every_byte_once_until_the_unit_ends(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("make")
    stream = handle.stream()
    reader = Background(lambda: b"".join(stream))
    reader.started.wait(WAIT)
    fake.start(handle.id)
    chunks = [b"one\n", b"two\n" * 1000, b"three\n"]
    for chunk in chunks:
        fake.output(handle.id, chunk)
    fake.complete(handle.id)  # drains, then removes the file the stream still reads
    assert reader.outcome() == b"".join(chunks)
    assert stream.offset == len(b"".join(chunks))


def test_two_streams_keep_their_own_offsets(client: wu.Client, fake: FakeSupervisor) -> None:
    handle = client.shell("make")
    fake.start(handle.id)
    fake.output(handle.id, b"abc")
    first = handle.stream()
    assert next(first) == b"abc"
    second = handle.stream()
    fake.output(handle.id, b"def")
    assert next(second) == b"abcdef"
    assert next(first) == b"def"
    first.close()
    second.close()
    assert list(first) == []


def test_a_stream_opened_after_the_end_gets_the_tail(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("make")
    fake.start(handle.id)
    fake.output(handle.id, b"x" * 70_000 + b"END")
    fake.complete(handle.id)
    data = b"".join(handle.stream())
    assert data.endswith(b"END")
    assert len(data) == 64 * 1024


def test_an_agent_stream_reads_its_transcript_which_outlives_the_unit(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.agent(add, 1, 2)
    fake.start(handle.id)
    fake.event(handle.id, "stdout", data="hello\n")
    fake.event(handle.id, "end", status="completed")
    fake.complete(handle.id, 3)
    lines = b"".join(handle.stream()).splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["start", "stdout", "end"]


def test_a_restarted_attempt_streams_its_fresh_output_file(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("make", on_lost="restart")
    fake.start(handle.id)
    fake.output(handle.id, b"first attempt\n")
    stream = handle.stream()
    assert next(stream) == b"first attempt\n"
    path = handle.row().output_path
    assert path is not None
    Path(path).unlink()  # what a restarted attempt's launch does
    Path(path).write_bytes(b"second\n")
    assert next(stream) == b"second\n"
    stream.close()


# -- notifications ---------------------------------------------------------------


def test_each_root_notice_goes_to_one_consumer_once(
    client: wu.Client, fake: FakeSupervisor, state_dir: Path
) -> None:
    handles = [client.shell(f"echo {i}") for i in range(3)]
    for handle in handles:
        fake.start(handle.id)
        fake.complete(handle.id)
    with wu.connect(state_dir) as other:
        mine, theirs = client.notifications(), other.notifications()
        got = [mine.get(0), theirs.get(0), mine.get(0)]
        assert sorted(n.id for n in got) == sorted(h.id for h in handles)
        assert all(n.status is Status.COMPLETED for n in got)
        assert mine.get_nowait() is None
        with pytest.raises(wu.NoNotification, match="no notification within"):
            theirs.get(timeout=0.02)


def test_notifications_wait_for_the_next_notice_and_end_when_closed(state_dir: Path) -> None:
    client = wu.connect(state_dir)
    fake = FakeSupervisor(state_dir)
    try:
        handle = client.shell("true")
        notices = client.notifications()
        first = Background(next, notices)
        first.started.wait(WAIT)
        fake.start(handle.id)
        fake.end(handle.id, Status.FAILED, exit_code=1)
        notice = first.outcome()
        assert (notice.id, notice.status, notice.exit_code) == (handle.id, Status.FAILED, 1)
        rest = Background(list, notices)
        rest.started.wait(WAIT)
        client.close()
        assert rest.outcome() == []
    finally:
        fake.close()
        client.close()


def test_a_stream_that_does_not_follow_ends_with_what_is_there_now(
    client: wu.Client, fake: FakeSupervisor
) -> None:
    handle = client.shell("make")
    assert list(client.stream(handle.id, follow=False)) == []  # pending: nothing yet
    fake.start(handle.id)
    fake.output(handle.id, b"so far")
    assert b"".join(client.stream(handle.id, follow=False)) == b"so far"


@pytest.mark.timeout(60)
def test_a_stream_on_a_one_host_ledger_never_reads_elsewhere(
    sup: wu.Supervisor, state_dir: Path, tmp_path: Path
) -> None:
    # `serve --http` advertises its URL even on SQLite. A running unit whose file a
    # client cannot open there (its end removed it, and the terminal row is a commit
    # away) is waited for, never read through that URL: on a ledger of one host
    # every unit runs beside its state dir. Before, this raised LedgerError for want
    # of a secret file, as the race did now and then in the HTTP parity tests.
    sup.advertise("http://127.0.0.1:9")
    gate = tmp_path / "gate"
    h = sup.shell(f"echo first; while [ ! -e {gate} ]; do sleep 0.01; done")
    record = sup.get(h.id)
    assert record.output_path is not None
    path = record.output_path

    def wrote_first() -> bool:
        return sup.get(h.id).pid is not None and os.path.exists(path) and os.path.getsize(path) > 0

    eventually(wrote_first, what="the unit to write its first line")
    os.unlink(path)  # as the end's drain does, just before the ledger's terminal row
    with wu.connect(state_dir) as client:
        stream = client.stream(h.id)
        assert stream.look() is None  # nothing here yet: wait, do not go elsewhere
        gate.touch()
        assert b"".join(stream) == b""  # its tail: the drain found no file either
    assert sup.wait(h.id, timeout=30).status is wu.Status.COMPLETED
