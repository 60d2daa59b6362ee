"""Every duration the API takes is checked one way: a clear SpecError, and nothing done.

An infinity used to pass some checks and then overflow in ``threading``
(``sup.wait(id, timeout=math.inf)`` raised OverflowError); a string raised
TypeError; a negative wait timeout said NotFinished. Each entry point below
refuses them before it acts, naming the parameter and what it must be.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests.client_support import FakeSupervisor
from tests.helpers import WAIT
from tests.restart_jobs import Phoenix
from workunits._core.seconds import seconds, seconds_or_none
from workunits.testing import ScriptedDriver

pytestmark = pytest.mark.timeout(60)

NOT_NUMBERS = [math.inf, -math.inf, math.nan, "5", True, b"1", [1]]
# Refused where the value must be >= 0 (a wait's timeout, a cancel's grace).
BAD_AT_LEAST_ZERO = [-1, -0.001, *NOT_NUMBERS]
# Refused where the value must be > 0 (a poll, a lease, a unit's time limit).
BAD_ABOVE_ZERO = [0, 0.0, *BAD_AT_LEAST_ZERO]
# Port 9 (discard) on loopback: nothing listens, so a request would fail otherwise.
NOBODY = "http://127.0.0.1:9"
TOKEN = "never-sent"  # noqa: S105 - nothing receives it
WAIT_TEXT = r"timeout must be a finite number of seconds >= 0, or None \(wait without a limit\)"


# -- the check itself ---------------------------------------------------------------------


def test_numbers_in_bounds_come_back_as_floats() -> None:
    assert seconds("x", 2) == 2.0
    assert isinstance(seconds("x", 2), float)
    assert seconds("x", 0, zero=True) == 0.0
    assert seconds("x", 5, least=5) == 5.0
    assert seconds("x", 86400, most=86400) == 86400.0
    assert seconds_or_none("x", None, none="never") is None
    assert seconds_or_none("x", 0.5, none="never") == 0.5


@pytest.mark.parametrize(
    ("value", "bounds", "said"),
    [
        (0, {}, "> 0"),
        (-1, {"zero": True}, ">= 0"),
        (4.9, {"least": 5}, ">= 5"),
        (86401, {"most": 86400}, "> 0 and <= 86400"),
        (math.inf, {}, "> 0"),
        (math.nan, {"zero": True}, ">= 0"),
        (True, {}, "> 0"),
        ("1", {}, "> 0"),
    ],
)
def test_a_refusal_names_the_parameter_its_bound_and_the_value(
    value: Any, bounds: dict[str, Any], said: str
) -> None:
    with pytest.raises(wu.SpecError) as info:
        seconds("grace", value, **bounds)
    assert str(info.value) == f"grace must be a finite number of seconds {said}, got {value!r}"


def test_what_none_means_is_said_where_none_is_taken() -> None:
    with pytest.raises(wu.SpecError, match=r"or None \(no ticks\), got -1"):
        seconds_or_none("tick_interval", -1, none="no ticks")
    with pytest.raises(wu.SpecError, match=r"> 0, got None"):
        seconds("poll", None)


# -- a running supervisor: refused, and the unit untouched ----------------------------------


@pytest.mark.parametrize("bad", BAD_AT_LEAST_ZERO)
def test_waits_refuse_a_bad_timeout_and_the_unit_runs_on(
    msup: wu.Supervisor, drive: ScriptedDriver, bad: Any
) -> None:
    unit = handle = drive.start()
    calls: list[Callable[[], object]] = [
        lambda: msup.wait(unit.id, timeout=bad),
        lambda: msup.result(unit.id, timeout=bad),
        lambda: handle.wait(timeout=bad),
        lambda: asyncio.run(msup.wait_async(unit.id, timeout=bad)),
        lambda: asyncio.run(msup.result_async(unit.id, timeout=bad)),
        lambda: msup.notifications().claim(timeout=bad),
        lambda: msup.ask(unit.id, "hello", timeout=bad),
        lambda: msup.drain(bad),
    ]
    for call in calls:
        with pytest.raises(wu.SpecError, match="timeout must be a finite number of seconds >= 0"):
            call()
    assert msup.get(unit.id).status is wu.Status.RUNNING
    assert drive.signals(unit.id) == ()
    drive.exit(unit.id, 0)
    assert msup.wait(unit.id, timeout=WAIT).status is wu.Status.COMPLETED  # drain() did not stop it


@pytest.mark.parametrize("bad", BAD_AT_LEAST_ZERO)
def test_cancel_refuses_a_bad_grace_and_signals_nothing(
    msup: wu.Supervisor, drive: ScriptedDriver, bad: Any
) -> None:
    unit = drive.start()
    with pytest.raises(wu.SpecError, match="grace must be a finite number of seconds >= 0"):
        msup.cancel(unit.id, grace=bad)
    with pytest.raises(wu.SpecError, match="grace"):
        asyncio.run(msup.cancel_async(unit.id, grace=bad))
    assert drive.signals(unit.id) == ()
    assert msup.get(unit.id).status is wu.Status.RUNNING


@pytest.mark.parametrize("bad", BAD_ABOVE_ZERO)
def test_streams_refuse_a_bad_poll_and_hold_no_retain(
    msup: wu.Supervisor, drive: ScriptedDriver, bad: Any
) -> None:
    unit = drive.start()
    with pytest.raises(wu.SpecError, match="poll must be a finite number of seconds > 0"):
        msup.stream(unit.id, poll=bad)
    with pytest.raises(wu.SpecError, match="poll"):
        msup.stream_async(unit.id, poll=bad)
    with pytest.raises(wu.SpecError, match="lease must be a finite number of seconds > 0"):
        msup.retain(unit.id, lease=bad)
    assert msup.get(unit.id).retain == 0  # a refused stream kept nothing back


@pytest.mark.parametrize("bad", BAD_ABOVE_ZERO)
def test_submits_refuse_a_bad_time_limit_and_start_nothing(sup: wu.Supervisor, bad: Any) -> None:
    with pytest.raises(wu.SpecError, match="timeout must be a finite number of seconds > 0"):
        sup.shell(["true"], timeout=bad)
    with pytest.raises(wu.SpecError, match="stall_after must be a finite number of seconds > 0"):
        sup.shell(["true"], stall_after=bad)
    with pytest.raises(wu.SpecError, match="timeout must be a finite number"):
        list(sup.pool().map(abs, [1], timeout=-1 if bad == 0 else bad))
    with pytest.raises(wu.SpecError, match="within must be a finite number of seconds > 0"):
        sup.teammate(Phoenix, "x", restart="transient", within=bad)
    assert sup.list() == []  # nothing was submitted


@pytest.mark.parametrize("bad", BAD_AT_LEAST_ZERO)
def test_gc_refuses_a_bad_age_and_forgets_nothing(sup: wu.Supervisor, bad: Any) -> None:
    ended = sup.wait(sup.shell(["true"]).id, timeout=WAIT)
    with pytest.raises(wu.SpecError, match="older_than must be a finite number of seconds >= 0"):
        sup.gc(older_than=bad)
    assert sup.get(ended.id).status is wu.Status.COMPLETED
    assert sup.gc(older_than=0) == 0  # nothing had expired yet: a good age still works


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        ("eviction_grace", math.inf),
        ("eviction_grace", "30"),
        ("eviction_grace", True),
        ("eviction_grace", -1),
        ("tick_interval", math.inf),
        ("session_lease", math.inf),
        ("session_lease", math.nan),
    ],
)
def test_a_supervisor_refuses_a_bad_duration_before_it_makes_its_state_dir(
    tmp_path: Path, option: str, bad: Any
) -> None:
    state = tmp_path / "state"
    with pytest.raises(wu.SpecError, match=f"{option} must be a finite number of seconds"):
        wu.Supervisor(state, **{option: bad})
    assert not state.exists()


# -- clients ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_AT_LEAST_ZERO)
def test_a_ledger_client_refuses_bad_durations_and_sends_no_request(
    state_dir: Path, bad: Any
) -> None:
    with wu.connect(state_dir) as client:
        fake = FakeSupervisor(client.state_dir)
        try:
            handle = client.shell("true")
            with pytest.raises(wu.SpecError, match=WAIT_TEXT):
                client.wait(handle.id, timeout=bad)
            with pytest.raises(wu.SpecError, match=WAIT_TEXT):
                client.request_result(1, timeout=bad)
            with pytest.raises(wu.SpecError, match="grace must be a finite number"):
                client.cancel(handle.id, grace=bad)
            with pytest.raises(wu.SpecError, match=WAIT_TEXT):
                client.notifications().claim(timeout=bad)
            assert client.ledger.requests.get(1) is None  # no cancel was asked for
        finally:
            fake.close()
    with pytest.raises(wu.SpecError, match="poll must be a finite number of seconds > 0"):
        wu.connect(state_dir, poll=bad if bad != -1 else 0)


@pytest.mark.parametrize("bad", [-1, math.inf, math.nan, "5", True])
def test_an_http_client_refuses_bad_durations_before_it_sends_anything(bad: Any) -> None:
    client = wu.HttpClient(NOBODY, token=TOKEN)
    try:
        for call in (
            lambda: client.wait("a12345678", timeout=bad),
            lambda: asyncio.run(client.wait_async("a12345678", timeout=bad)),
            lambda: client.cancel("a12345678", grace=bad),
            lambda: client.renew_notice("a12345678", "token", lease=bad),
            lambda: client.notifications(lease=bad),
        ):
            with pytest.raises(wu.SpecError, match="must be a finite number of seconds"):
                call()
    finally:
        client.close()
    with pytest.raises(wu.SpecError, match="timeout must be a finite number of seconds > 0"):
        wu.HttpClient(NOBODY, token=TOKEN, timeout=bad)


# -- inside a unit ------------------------------------------------------------------------


def _waits_with(timeout: Any) -> str:
    ctx = wu.current()
    child = ctx.shell(["true"])
    errors = []
    for call in (
        lambda: ctx.wait(child, timeout=timeout),
        lambda: ctx.cancel(child, grace=timeout),
        lambda: ctx.wait_for("never", timeout=timeout),
    ):
        try:
            call()
        except wu.SpecError as exc:
            errors.append(str(exc).split(" must")[0])
    ctx.wait(child, timeout=30)
    return ",".join(errors)


def test_a_units_context_refuses_bad_durations(sup: wu.Supervisor) -> None:
    assert sup.result(sup.agent(_waits_with, math.inf).id, timeout=WAIT) == "timeout,grace,timeout"
