"""Shared fixtures: supervisors on real or manual time, and a leak check after every test."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pykka
import pytest

import workunits as wu
from tests.foreign_user import nobody, shared_dir  # noqa: F401 - fixtures: a second local user
from tests.loop_guard import guard  # noqa: F401 - fixture: async tests whose loop must not block
from tests.pg_proxy import ProxiedLedger, proxied_ledger
from tests.postgres_server import PostgresServer, why_not_available
from workunits import Supervisor
from workunits.testing import ManualClock, ScriptedDriver

T = TypeVar("T")

GRACE = 10.0  # eviction grace of the manual-time supervisor


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the whole run, started on first use (see postgres_server)."""
    reason = why_not_available()
    if reason is not None:
        pytest.skip(reason)
    with PostgresServer() as server:
        yield server


@pytest.fixture
def ledgers(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ProxiedLedger]:
    """A database of this test's own, directly and through a proxy that can cut a COMMIT's
    answer. One secret for every state dir of the test (and the processes they start),
    as hosts sharing one ledger are given: each verifies what the others signed."""
    secret = tmp_path / "secret"
    secret.write_text(secrets.token_urlsafe(32))
    secret.chmod(0o600)
    monkeypatch.setenv("WORKUNITS_SECRET_FILE", str(secret))
    with proxied_ledger(postgres_server.socket_dir, postgres_server.database()) as ledger:
        yield ledger


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of an empty database of this test's own."""
    with postgres_server.database() as url:
        yield url


@pytest.fixture
def sup(state_dir: Path) -> Iterator[Supervisor]:
    """A supervisor on real time with its ticker (timeouts and cancel grace run by themselves)."""
    with Supervisor(state_dir, install_signal_handlers=False) as supervisor:
        yield supervisor


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def msup(state_dir: Path, clock: ManualClock) -> Iterator[Supervisor]:
    """A supervisor on manual time with no ticker: deadlines run only at ``msup.tick()``.

    It has a state dir of its own: one supervisor per state dir, and a test may
    use both this and ``sup``.
    """
    with Supervisor(
        state_dir.with_name("manual-state"),
        clock=clock,
        tick_interval=None,
        eviction_grace=GRACE,
        install_signal_handlers=False,
    ) as supervisor:
        yield supervisor


@pytest.fixture
def drive(msup: Supervisor) -> ScriptedDriver:
    """Scripted units (letter ``x``) on the manual-time supervisor."""
    return ScriptedDriver(msup)


@pytest.fixture(scope="module")
def shared_sup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    """One supervisor for a module's tests that only check refusals and leave no trace.

    Starting a supervisor costs a little; hundreds of argument checks need not
    pay it each. Tests using it assert that they registered nothing.
    """
    state = tmp_path_factory.mktemp("shared") / "state"
    with Supervisor(state, install_signal_handlers=False) as supervisor:
        yield supervisor


@pytest.fixture(autouse=True)
def _no_actor_outlives_its_test() -> Iterator[None]:
    # Module-scoped fixtures are set up before this one, so their actors are in here.
    before = {ref.actor_urn for ref in pykka.ActorRegistry.get_all()}
    yield
    # A unit's actor stops itself right after it reports its end, so one may still
    # be on its way out when close() returns: wait for that, bounded, then insist.
    started = [r for r in pykka.ActorRegistry.get_all() if r.actor_urn not in before]
    for ref in started:
        ref.actor_stopped.wait(5)
    assert [r for r in started if r.is_alive()] == []


def eventually(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Re-check ``check`` until it returns something truthy; fail after ``timeout``.

    A bounded, timed wait on a condition, not a sleep followed by an assertion.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    delay = 0.001
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or check}")
        pause.wait(delay)
        delay = min(delay * 2, 0.05)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is neither a zombie nor dead."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        # ProcessLookupError: it was reaped between the open and the read.
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def parent_of(pid: int) -> int:
    """The parent pid of a live process ``pid``, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def running_pid(sup: wu.Supervisor, work_id: str) -> int:
    """The unit's pid, once its process exists."""
    return eventually(lambda: sup.get(work_id).pid, what=f"{work_id} to start")


def open_fds(besides: Path | None = None) -> int:
    """This process's open descriptors, but those of files under ``besides`` (a
    supervisor's warm files, held open on purpose until a unit takes them)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        if besides is not None:
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except FileNotFoundError:  # the descriptor listdir itself used
                continue
            if target.startswith(f"{besides}{os.sep}"):
                continue
        count += 1
    return count


# What an attacker may have put at a unit's output path before it was made.
PLANTS = ("file", "dangling symlink", "symlink to a file")


def plant(path: Path, what: str, scratch: Path) -> None:
    """Put ``what`` (one of ``PLANTS``) at ``path``; a symlink points at ``scratch``'s
    victim file or at nothing there."""
    victim = scratch / "victim"
    victim.write_bytes(b"keep me")
    if what == "file":
        path.write_bytes(b"planted")
    elif what == "dangling symlink":
        path.symlink_to(scratch / "nowhere")
    else:
        path.symlink_to(victim)


def assert_plant_untouched(path: Path, what: str, scratch: Path) -> None:
    """Nothing was written through the plant, and the plant itself is as it was."""
    assert (scratch / "victim").read_bytes() == b"keep me"
    assert not (scratch / "nowhere").exists()
    if what == "file":
        assert path.read_bytes() == b"planted"
    else:
        assert path.is_symlink()
