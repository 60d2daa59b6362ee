"""A PostgreSQL ledger that restarts under a client and under ``serve``.

Seen from the proxy (``tests.pg_proxy``), a restart cuts every connection and
refuses new ones until the server is back. A client's reads, waits and takes
carry on across it (up to ``reconnect_within``, 30 s by default); ``serve``
says once per distinct failure that the ledger is away, in one line, and
once that it answers again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

import workunits as wu
from tests.cli.live import Serve
from tests.pg_proxy import ProxiedLedger
from workunits import Status

pytestmark = pytest.mark.timeout(180)

T = TypeVar("T")


def _in_thread(call: Callable[[], T]) -> tuple[threading.Thread, list[T | BaseException]]:
    answer: list[T | BaseException] = []

    def run() -> None:
        try:
            answer.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test to look at
            answer.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answer


def _across_a_restart(ledgers: ProxiedLedger, call: Callable[[], T]) -> T:
    """``call()`` started while the ledger is away, which comes back once it was met."""
    ledgers.proxy.restart()
    thread, answer = _in_thread(call)
    assert ledgers.proxy.refused.wait(30), "the call never reached for the ledger"
    ledgers.proxy.refuse(False)
    thread.join(60)
    assert answer, "the call did not return after the ledger came back"
    (value,) = answer
    if isinstance(value, BaseException):
        raise value
    return value


def test_a_clients_reads_and_takes_carry_on_across_a_ledger_restart(
    tmp_path: Path, ledgers: ProxiedLedger
) -> None:
    with (
        wu.Supervisor(tmp_path / "host", ledger=ledgers.direct, install_signal_handlers=False),
        wu.connect(tmp_path / "client", ledger=ledgers.proxied) as client,
    ):
        handle = client.shell("echo hello")
        record = _across_a_restart(ledgers, lambda: client.wait(handle.id, timeout=60))
        assert record.status is Status.COMPLETED
        assert _across_a_restart(ledgers, lambda: client.get(handle.id)).id == handle.id
        listed = _across_a_restart(ledgers, client.list)
        assert [r.id for r in listed] == [handle.id]
        notice = _across_a_restart(ledgers, lambda: client.notifications().get(timeout=60))
        assert notice.id == handle.id


def test_a_client_gives_up_after_reconnect_within_with_the_ledgers_error(
    tmp_path: Path, ledgers: ProxiedLedger
) -> None:
    with wu.connect(tmp_path / "client", ledger=ledgers.proxied, reconnect_within=1.0) as client:
        handle = client.shell("true")
        ledgers.proxy.restart()
        started = time.monotonic()
        with pytest.raises(wu.LedgerError, match=r"lost the ledger|cannot connect"):
            client.get(handle.id)
        assert time.monotonic() - started >= 1.0  # it tried again for that long
        ledgers.proxy.refuse(False)


def test_serve_says_once_per_failure_that_the_ledger_is_away_and_when_it_is_back(
    tmp_path: Path, ledgers: ProxiedLedger
) -> None:
    serve = Serve(tmp_path / "host", "--ledger", ledgers.proxied)
    try:
        assert "supervising" in serve.banner
        with wu.connect(tmp_path / "client", ledger=ledgers.direct) as client:
            before = client.shell("echo before")
            assert client.wait(before.id, timeout=60).status is Status.COMPLETED
            ledgers.proxy.restart()
            lines = [serve.read_line()]  # the first complaint: the ledger is away
            assert ledgers.proxy.refused.wait(30)
            # Away for a while longer: every tick meets it again, and says nothing new.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                lines += _lines_within(serve, deadline - time.monotonic())
            ledgers.proxy.refuse(False)
            while not any("answers again" in line for line in lines):
                lines.append(serve.read_line())
            after = client.shell("echo after")
            assert client.wait(after.id, timeout=60).status is Status.COMPLETED
    finally:
        serve.stop()
    said = [line.rstrip("\n") for line in lines]
    assert not any("Traceback" in line for line in said), "\n".join(said)
    assert not any(line.startswith((" ", "\t")) for line in said), "\n".join(said)
    complaints = [line for line in said if "answers again" not in line]
    assert len(complaints) == len(set(complaints)), "\n".join(said)
    assert len(complaints) <= 12, "\n".join(said)  # a few distinct failures, said once each


def _lines_within(serve: Serve, timeout: float) -> list[str]:
    import select  # noqa: PLC0415

    assert serve.proc.stderr is not None
    ready, _, _ = select.select([serve.proc.stderr], [], [], max(0.0, timeout))
    return [serve.proc.stderr.readline().decode()] if ready else []
