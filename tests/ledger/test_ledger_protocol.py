"""A Hypothesis state machine over the ledger's protocol.

Submits with keys, starts, progress and checkpoints from current and stale
attempts, restarts (the ledger is closed and reopened by a new session, which
resumes the units the dead one left running), terminal writes from current
and stale attempts, and deliveries. After every step it checks:

- invariant 11: every terminal unit has exactly one outbox row, with its
  status, and nothing else has one; each (id, status) is delivered once;
- invariant 12: one unit per key, the one the first submit returned;
- invariant 13: a stale attempt's write changed nothing.
"""

from __future__ import annotations

import contextlib
import operator
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.ledger.support import ManualClock, raw
from tests.postgres_server import PostgresServer
from workunits._core import ids as _ids
from workunits._core.errors import IdempotencyConflict, StaleAttempt
from workunits._core.status import Status, is_terminal
from workunits._ledger import Call, Ledger, NewUnit

KEYS = st.sampled_from(["k0", "k1", "k2", None])
TERMINAL = st.sampled_from([s for s in Status if is_terminal(s)])


@dataclass
class Model:
    key: str | None
    variant: int
    status: Status = Status.PENDING
    attempt: int = 1
    checkpoint: object = None
    progress: float | None = None


@dataclass
class World:
    units: dict[str, Model] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    delivered: Counter[tuple[str, str]] = field(default_factory=Counter)


class LedgerProtocol(RuleBasedStateMachine):
    """One example: a fresh state dir, and a fresh database when ``server`` is given."""

    def __init__(self, server: PostgresServer | None = None) -> None:
        super().__init__()
        self.cleanup = contextlib.ExitStack()
        self.url = None if server is None else self.cleanup.enter_context(server.database())
        self.dir = Path(tempfile.mkdtemp(prefix="ledger-protocol-"))
        self.clock = ManualClock()
        self.session_no = 1
        self.ledger = self._open()
        self.world = World()

    def _open(self) -> Ledger:
        ledger = Ledger(self.dir / "state", clock=self.clock, ledger=self.url)
        ledger.sessions.open(self.session, pid=1)
        return ledger

    @property
    def session(self) -> str:
        return f"s{self.session_no:08d}"

    def teardown(self) -> None:
        self.ledger.close()
        shutil.rmtree(self.dir)
        self.cleanup.close()

    def _pick(self, data: st.DataObject, *statuses: Status) -> str:
        # In submit order: IDs are random, so sorting them would make replays differ.
        ids = [i for i, m in self.world.units.items() if m.status in statuses]
        return data.draw(st.sampled_from(ids))

    def _has(self, *statuses: Status) -> bool:
        return any(m.status in statuses for m in self.world.units.values())

    # -- rules ----------------------------------------------------------------------

    @rule(key=KEYS, variant=st.integers(0, 1))
    def submit(self, key: str | None, variant: int) -> None:
        work_id = _ids.mint("a")
        spec = self.ledger.units.encode_spec(Call(operator.add, (variant, 1)), work_id)
        new = NewUnit(work_id, "agent", spec, self.clock.now(), key=key, max_attempts=100)
        existing = None if key is None else self.world.by_key.get(key)
        if existing is not None and self.world.units[existing].variant != variant:
            with pytest.raises(IdempotencyConflict, match=existing):
                self.ledger.units.submit(new)
            return
        row, created = self.ledger.units.submit(new)
        if existing is not None:
            assert (row.id, created) == (existing, False)
            return
        assert (row.id, created) == (work_id, True)
        self.world.units[work_id] = Model(key, variant)
        if key is not None:
            self.world.by_key[key] = work_id

    @precondition(lambda self: self._has(Status.PENDING))
    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        work_id = self._pick(data, Status.PENDING)
        assert self.ledger.attempts.write(
            work_id, attempt=1, status="running", session=self.session
        )
        self.world.units[work_id].status = Status.RUNNING

    @precondition(lambda self: bool(self.world.units))
    @rule(data=st.data(), stale=st.booleans(), fraction=st.floats(0, 1))
    def progress(self, data: st.DataObject, stale: bool, fraction: float) -> None:
        work_id = self._pick(data, *Status)
        model = self.world.units[work_id]
        attempt = model.attempt - 1 if stale else model.attempt
        written = self.ledger.attempts.write_progress_batch([(work_id, attempt, fraction, None)])
        expect = not stale and not is_terminal(model.status)
        assert written == int(expect)
        if expect:
            model.progress = fraction

    @precondition(lambda self: self._has(Status.PENDING, Status.RUNNING))
    @rule(data=st.data(), stale=st.booleans(), group=st.integers(0, 8))
    def checkpoint(self, data: st.DataObject, stale: bool, group: int) -> None:
        work_id = self._pick(data, Status.PENDING, Status.RUNNING)
        model = self.world.units[work_id]
        if stale:
            with pytest.raises(StaleAttempt):
                self.ledger.attempts.save_checkpoint(work_id, model.attempt - 1, {"group": group})
            return
        assert self.ledger.attempts.save_checkpoint(work_id, model.attempt, {"group": group})
        model.checkpoint = {"group": group}

    @precondition(lambda self: self._has(Status.RUNNING, Status.PENDING))
    @rule(data=st.data(), status=TERMINAL, stale=st.booleans())
    def end(self, data: st.DataObject, status: Status, stale: bool) -> None:
        work_id = self._pick(data, Status.RUNNING, Status.PENDING)
        model = self.world.units[work_id]
        if model.status == Status.PENDING:
            status = Status.KILLED  # a cancel before start: the only way out of pending
        if stale:
            with pytest.raises(StaleAttempt):
                self.ledger.attempts.write(work_id, attempt=model.attempt - 1, status=status)
            return
        assert self.ledger.attempts.write(work_id, attempt=model.attempt, status=status)
        model.status = status

    @precondition(lambda self: any(is_terminal(m.status) for m in self.world.units.values()))
    @rule(data=st.data(), status=TERMINAL)
    def late_end(self, data: st.DataObject, status: Status) -> None:
        """A second terminal write: another status is ignored (the process exited after
        the kill); the same status is a replay that writes no second notice."""
        work_id = self._pick(data, *(s for s in Status if is_terminal(s)))
        model = self.world.units[work_id]
        written = self.ledger.attempts.write(work_id, attempt=model.attempt, status=status)
        assert written == (status == model.status)

    @rule()
    def restart(self) -> None:
        """The supervisor dies; a new session resumes what it left running."""
        self.ledger.close()
        self.session_no += 1
        self.clock.advance(1)
        self.ledger = self._open()
        for row in self.ledger.sessions.units_of_dead_sessions(self.session):
            model = self.world.units[row.id]
            assert model.status == Status.RUNNING
            assert self.ledger.attempts.resume(row.id, self.session, expected=model.attempt) == (
                model.attempt + 1
            )
            model.attempt += 1
            assert self.ledger.units.require(row.id).last_checkpoint() == model.checkpoint

    @rule(limit=st.integers(1, 3))
    def deliver(self, limit: int) -> None:
        for notice in self.ledger.outbox.undelivered(None, limit=limit):
            assert self.ledger.outbox.mark_delivered(notice.id, notice.status)
            self.world.delivered[(notice.id, notice.status.value)] += 1

    # -- invariants ---------------------------------------------------------------

    @invariant()
    def rows_match_the_model(self) -> None:
        rows = {row.id: row for row in self.ledger.units.list()}
        assert set(rows) == set(self.world.units)
        for work_id, model in self.world.units.items():
            row = rows[work_id]
            assert row.status == model.status
            assert row.attempt == model.attempt  # 13: nothing stale moved it
            assert row.last_checkpoint() == model.checkpoint
            assert row.progress == model.progress

    @invariant()
    def one_unit_per_key(self) -> None:
        with raw(self.ledger) as conn:
            keys = dict(conn.execute("SELECT key, id FROM units WHERE key IS NOT NULL").fetchall())
        assert keys == self.world.by_key

    @invariant()
    def one_notice_per_terminal_transition(self) -> None:
        with raw(self.ledger) as conn:
            notices = [tuple(row) for row in conn.execute("SELECT id, status FROM notifications")]
        terminal = {
            (i, m.status.value) for i, m in self.world.units.items() if is_terminal(m.status)
        }
        assert sorted(notices) == sorted(terminal)
        assert all(count == 1 for count in self.world.delivered.values())
        assert set(self.world.delivered) <= terminal
        waiting = {(n.id, n.status.value) for n in self.ledger.outbox.undelivered(None)}
        assert waiting == terminal - set(self.world.delivered)


SETTINGS = settings(
    max_examples=40,
    database=None,  # no example database left in the work tree
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.timeout(300)
def test_ledger_protocol(backend: str, request: pytest.FixtureRequest) -> None:
    """The same machine against each backend (PostgreSQL: a new database per example)."""
    server = request.getfixturevalue("postgres_server") if backend == "postgres" else None
    # A factory is what Hypothesis calls; its stubs say a class.
    run_state_machine_as_test(lambda: LedgerProtocol(server), settings=SETTINGS)  # type: ignore[arg-type]
