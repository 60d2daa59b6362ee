"""``list`` with filters and keyset pages: Supervisor (memory + ledger), Client, and their parity.

A page of a supervisor is the ledger's indexed page with memory's records in
place; a status filter takes memory's word for resident units (their newest
status may not be written yet). The state machine checks, through a unit
lifecycle, that every filter's pages, concatenated, are exactly the units
the filter matches, in order, on both surfaces.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from workunits import SpecError, Status, Supervisor, UnknownWork, WorkRecord, connect
from workunits.testing import ManualClock, ScriptedDriver


def _pages(list_page: object, size: int, **filters: object) -> list[str]:
    """Every page of ``size``, following ``after``, bounded by the number of units."""
    seen: list[str] = []
    after = None
    for _ in range(1000):
        page: list[WorkRecord] = list_page(limit=size, after=after, **filters)  # type: ignore[operator]
        seen += [r.id for r in page]
        if len(page) < size:
            return seen
        after = page[-1].id
    raise AssertionError("more pages than units")


def test_pages_filters_and_the_whole_list_agree(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    root = drive.start(description="coordinator of the release")
    kids = []
    for n in range(5):
        clock.advance(1)  # submit order is time order
        kids.append(drive.start(parent=root.id, description=f"shard {n} of repo-17"))
    drive.exit(kids[0].id, 3)
    everything = [r.id for r in msup.list()]
    assert everything == [root.id, *(k.id for k in kids)]  # oldest first, a list still
    assert _pages(msup.list, 2) == everything
    assert _pages(msup.list, 2, order="newest") == everything[::-1]
    assert _pages(msup.list, 2, parent=root.id) == [k.id for k in kids]
    assert [r.id for r in msup.list(status="failed")] == [kids[0].id]
    assert _pages(msup.list, 1, status="running") == [root.id, *(k.id for k in kids[1:])]
    assert [r.id for r in msup.list(search="coordinator")] == [root.id]
    assert [r.id for r in msup.list(search="repo-17 shard", limit=2)] == [kids[0].id, kids[1].id]
    made = msup.get(kids[2].id).created_at
    window = msup.list(created_after=made, created_before=made + 1)
    assert [r.id for r in window] == [kids[2].id]
    assert msup.list(limit=1, after=kids[4].id) == []


def test_a_page_shows_memorys_record(msup: Supervisor, drive: ScriptedDriver) -> None:
    unit = drive.start()
    drive.write(unit.id, b"out")
    msup.read_output(unit.id)  # the offset moves in memory; the ledger has it later
    (shown,) = msup.list(limit=10)
    assert shown == msup.get(unit.id)


def test_bad_arguments_say_what_is_wrong(msup: Supervisor, drive: ScriptedDriver) -> None:
    drive.start()
    with pytest.raises(SpecError, match="limit must be an int >= 1"):
        msup.list(limit=0)
    with pytest.raises(SpecError, match="order must be 'oldest' or 'newest'"):
        msup.list(order="sideways")
    with pytest.raises(SpecError, match="status must be one of"):
        msup.list(status="finished")
    with pytest.raises(SpecError, match="created_after must be seconds"):
        msup.list(created_after="yesterday")  # type: ignore[arg-type]
    with pytest.raises(UnknownWork):
        msup.list(after="x00000000", limit=1)


def test_a_client_pages_the_ledger_as_the_supervisor_does(sup: Supervisor, tmp_path: Path) -> None:
    units = [sup.shell("true", description=f"job {n}", key=f"k{n}") for n in range(7)]
    for u in units:
        u.wait(30)
    with connect(sup.state_dir) as client:
        assert _pages(client.list, 3) == _pages(sup.list, 3) == [u.id for u in units]
        assert _pages(client.list, 2, kind="shell", order="newest") == [u.id for u in units][::-1]
        assert [r.id for r in client.list(key="k3")] == [units[3].id]
        assert [r.id for r in client.list(search="job 4")] == [units[4].id]
        done = [r.id for r in sup.list(status="completed", limit=2)]
        assert (
            [r.id for r in client.list(status="completed", limit=2)]
            == done
            == [
                units[0].id,
                units[1].id,
            ]
        )


class Lifecycle(RuleBasedStateMachine):
    """Units start, report, end; every filter's pages stay the filtered list, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.status: dict[str, Status] = {}
        self.parent: dict[str, str | None] = {}

    @initialize()
    def open(self) -> None:
        import tempfile  # noqa: PLC0415 - one dir per example

        self.tmp = tempfile.TemporaryDirectory()
        self.clock = ManualClock()
        self.sup = Supervisor(
            Path(self.tmp.name) / "state",
            clock=self.clock,
            tick_interval=None,
            install_signal_handlers=False,
        )
        self.drive = ScriptedDriver(self.sup)

    @rule(child=st.booleans())
    def start(self, child: bool) -> None:
        if len(self.ids) >= 12:
            return
        running = [i for i in self.ids if self.status[i] == Status.RUNNING]
        parent = running[0] if child and running else None
        self.clock.advance(1)  # submit order is time order
        unit = self.drive.start(parent=parent)
        self.ids.append(unit.id)
        self.status[unit.id] = Status.RUNNING
        self.parent[unit.id] = parent

    @rule(n=st.integers(0, 11), code=st.sampled_from([0, 1]))
    def end(self, n: int, code: int) -> None:
        running = [i for i in self.ids if self.status[i] == Status.RUNNING]
        if not running:
            return
        work_id = running[n % len(running)]
        self.drive.exit(work_id, code)
        self.sup.wait(work_id, 30)
        for i in self.ids:  # its running children are killed with it
            if self.parent[i] == work_id and self.status[i] == Status.RUNNING:
                self.sup.wait(i, 30)
                self.status[i] = Status.KILLED
        self.status[work_id] = Status.COMPLETED if code == 0 else Status.FAILED

    @rule()
    def tick(self) -> None:
        self.sup.tick()  # grouped writes land, records may leave memory

    @invariant()
    def pages_are_the_filtered_list(self) -> None:
        if not hasattr(self, "sup"):
            return
        for status in (None, *Status):
            expected = [i for i in self.ids if status is None or self.status[i] == status]
            for size in (1, 3):
                got = _pages(self.sup.list, size, status=status)
                assert got == expected, (status, size)
            assert _pages(self.sup.list, 2, status=status, order="newest") == expected[::-1]

    def teardown(self) -> None:
        if hasattr(self, "sup"):
            self.sup.close()
            self.tmp.cleanup()


Lifecycle.TestCase.settings = settings(
    max_examples=8,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_pages_through_a_lifecycle = pytest.mark.timeout(240)(Lifecycle.TestCase)
