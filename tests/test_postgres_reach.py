"""Several state dirs on one PostgreSQL ledger, as several hosts would have them.

Each supervisor and client here has a state dir of its own (what another
host would have): a shared secret file makes their stored specs verify
everywhere, large values live in the database, and a running unit's output
is read through its supervisor's advertised HTTP API (real server, real
``workunits serve`` processes).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.large_values_jobs import big_result, digest
from workunits._core.errors import LedgerError

pytest.importorskip("httpx")  # serve --http needs the [http] extra
from tests.http.server import Served

pytestmark = pytest.mark.timeout(120)

BIG = (1 << 20) + 4096  # past valuestore.LARGE_VALUE: kept beside the row, not in it


def _secret(path: Path) -> Path:
    path.write_text(secrets.token_urlsafe(32))
    path.chmod(0o600)
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    return _secret(tmp_path / "secret")


def _supervisor(state_dir: Path, url: str, secret: Path) -> wu.Supervisor:
    return wu.Supervisor(state_dir, ledger=url, secret_file=secret, install_signal_handlers=False)


# -- the shared secret ------------------------------------------------------------


def test_a_spec_signed_in_one_state_dir_runs_on_a_supervisor_of_another(
    postgres_url: str, tmp_path: Path, secret: Path
) -> None:
    from operator import add  # noqa: PLC0415 - stored by reference, signed

    with wu.connect(tmp_path / "client", ledger=postgres_url, secret_file=secret) as client:
        handle = client.agent(add, 2, 3)  # pending: no supervisor runs yet
        with _supervisor(tmp_path / "host-b", postgres_url, secret):
            assert client.result(handle.id, timeout=30) == 5


def test_a_supervisor_with_another_secret_refuses_the_spec_and_says_why(
    postgres_url: str, tmp_path: Path, secret: Path
) -> None:
    from operator import add  # noqa: PLC0415

    other = _secret(tmp_path / "other-secret")
    with wu.connect(tmp_path / "client", ledger=postgres_url, secret_file=secret) as client:
        handle = client.agent(add, 2, 3)
        with _supervisor(tmp_path / "host-b", postgres_url, other):
            record = client.wait(handle.id, timeout=30)
    assert record.status == wu.Status.FAILED
    assert record.error is not None
    assert "LedgerTampered" in record.error
    assert "same secret file" in record.error


def test_state_dirs_without_a_secret_file_do_not_trust_each_other(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operator import add  # noqa: PLC0415

    monkeypatch.delenv("WORKUNITS_SECRET_FILE", raising=False)
    with wu.connect(tmp_path / "client", ledger=postgres_url) as client:
        handle = client.agent(add, 2, 3)
        with wu.Supervisor(tmp_path / "host-b", ledger=postgres_url, install_signal_handlers=False):
            record = client.wait(handle.id, timeout=30)
    assert record.status == wu.Status.FAILED
    assert "same secret file" in (record.error or "")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_secret_file_others_may_read_is_refused_before_anything_is_made(
    tmp_path: Path, mode: int
) -> None:
    path = _secret(tmp_path / "secret")
    path.chmod(mode)
    with pytest.raises(wu.SecretFileError, match="chmod 600"):
        wu.Supervisor(tmp_path / "state", secret_file=path, install_signal_handlers=False)
    with pytest.raises(wu.SecretFileError, match="chmod 600"):
        wu.connect(tmp_path / "client", secret_file=path)
    assert not (tmp_path / "state").exists()


def test_a_short_or_missing_secret_file_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("tiny")
    short.chmod(0o600)
    with pytest.raises(wu.SecretFileError, match="at least 16"):
        wu.connect(tmp_path / "client", secret_file=short)
    with pytest.raises(wu.SecretFileError, match="cannot read"):
        wu.connect(tmp_path / "client", secret_file=tmp_path / "absent")


def test_the_secret_file_comes_from_the_environment_and_replaces_the_state_dirs_key(
    tmp_path: Path, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operator import add  # noqa: PLC0415

    monkeypatch.setenv("WORKUNITS_SECRET_FILE", str(secret))
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        assert sup.result(sup.agent(add, 1, 1).id, timeout=30) == 2
    assert not (tmp_path / "state" / "secret.key").exists()  # the file's key signed it


# -- large values ----------------------------------------------------------------


def test_large_values_cross_state_dirs_through_the_database(
    postgres_url: str, tmp_path: Path, secret: Path
) -> None:
    payload = secrets.token_hex(BIG // 2)
    with wu.connect(tmp_path / "client", ledger=postgres_url, secret_file=secret) as client:
        taken = client.agent(digest, payload)  # a spec too big for its row
        made = client.agent(big_result, BIG)  # a result too big for its row
        with _supervisor(tmp_path / "host-b", postgres_url, secret):
            assert client.result(taken.id, timeout=60) == digest(payload)
            assert client.result(made.id, timeout=60) == "r" * BIG
    assert not (tmp_path / "client" / "values").exists()
    assert not (tmp_path / "host-b" / "values").exists()


# -- live output through the advertised URL ----------------------------------------


def _served(state_dir: Path, url: str, secret: Path, *extra: str) -> Served:
    return Served(state_dir, "--ledger", url, "--secret-file", str(secret), *extra)


def _url_of(client: wu.Client, session: str) -> str | None:
    found = client.ledger.sessions.get(session)
    assert found is not None
    return found.url


def _first_line_then_wait(gate: Path) -> str:
    return f"echo first-line; while [ ! -e {gate} ]; do sleep 0.02; done; echo second-line"


def test_a_client_of_another_state_dir_reads_live_output_through_the_advertised_url(
    postgres_url: str, tmp_path: Path, secret: Path
) -> None:
    served = _served(tmp_path / "host-a", postgres_url, secret)
    try:
        with wu.connect(tmp_path / "client", ledger=postgres_url, secret_file=secret) as client:
            gate = tmp_path / "gate"
            handle = client.shell(_first_line_then_wait(gate))
            session = eventually(
                lambda: client.ledger.units.require(handle.id).session,
                what="the unit to be adopted",
            )
            assert _url_of(client, session) == served.url
            stream = client.stream(handle.id)
            seen = b""
            while b"first-line" not in seen:
                seen += next(stream)
            assert client.get(handle.id).status == wu.Status.RUNNING  # live, not the tail
            gate.touch()
            seen += b"".join(stream)
            assert seen == b"first-line\nsecond-line\n"
    finally:
        served.stop()


def test_reading_live_output_with_another_secret_is_refused_clearly(
    postgres_url: str, tmp_path: Path, secret: Path
) -> None:
    served = _served(tmp_path / "host-a", postgres_url, secret)
    try:
        with wu.connect(tmp_path / "client", ledger=postgres_url, secret_file=secret) as client:
            gate = tmp_path / "gate"
            handle = client.shell(_first_line_then_wait(gate))
            eventually(lambda: client.get(handle.id).status == wu.Status.RUNNING, what="it to run")
        wrong = _secret(tmp_path / "wrong")
        with (
            wu.connect(tmp_path / "other", ledger=postgres_url, secret_file=wrong) as other,
            pytest.raises(LedgerError, match=r"HTTP 401.*same secret file"),
        ):
            next(other.stream(handle.id))
        gate.touch()
    finally:
        served.stop()


def test_serve_advertises_the_url_it_is_given(
    postgres_url: str, tmp_path: Path, secret: Path
) -> None:
    served = _served(
        tmp_path / "host-a", postgres_url, secret, "--advertise", "http://host-a.example:8080/"
    )
    try:
        with wu.connect(tmp_path / "client", ledger=postgres_url, secret_file=secret) as client:
            handle = client.shell("true")
            client.wait(handle.id, timeout=30)
            session = client.ledger.units.require(handle.id).session
            assert session is not None
            assert _url_of(client, session) == "http://host-a.example:8080"
    finally:
        served.stop()


def test_live_output_of_a_supervisor_that_advertised_no_url_is_a_clear_error(
    postgres_url: str, tmp_path: Path, secret: Path
) -> None:
    with _supervisor(tmp_path / "host-a", postgres_url, secret) as sup:  # no HTTP API
        gate = tmp_path / "gate"
        unit = sup.shell(_first_line_then_wait(gate))
        with wu.connect(tmp_path / "client", ledger=postgres_url, secret_file=secret) as client:
            eventually(lambda: client.get(unit.id).pid, what="its pid in the ledger")
            with pytest.raises(LedgerError, match=r"advertised no URL.*--http"):
                next(client.stream(unit.id))
        gate.touch()
        assert sup.wait(unit.id, timeout=30).status == wu.Status.COMPLETED
