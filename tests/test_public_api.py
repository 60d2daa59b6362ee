"""The public surface is declared and locked: a name appears or disappears only on purpose."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import workunits
import workunits.actors
import workunits.supervisor
import workunits.testing

WORKUNITS = {
    "AgentCall",  # issue 41: batches and the executor contract
    "AgentExecutor",
    "BatchItemsFailed",
    "UnitFuture",
    "Claim",
    "OutputChunk",
    "Retain",
    "AskTimeout",
    "Attempt",
    "Cancelled",
    "ChildHandle",
    "ChildTeammate",
    "Client",
    "ClientClosed",
    "ClientHandle",
    "CommitUnknown",
    "IdempotencyConflict",
    "InvalidArgument",
    "InvalidTransition",
    "InvalidWorkId",
    "KindFault",
    "KindTaken",
    "LedgerCorrupt",
    "LedgerError",
    "LedgerFull",
    "LedgerGone",
    "LedgerTampered",
    "LedgerVersionError",
    "Mailbox",
    "MailboxClosed",
    "MailboxItem",
    "MonitorEvent",
    "NoCurrentUnit",
    "NoLedger",
    "NoNotification",
    "NoSuchMethod",
    "NotFinished",
    "NotRetryable",
    "Notification",
    "Outcome",
    "Pool",
    "Reason",
    "Retry",
    "Sandbox",
    "SandboxEscalation",
    "SandboxUnavailable",
    "ScheduleFiring",
    "ScheduleInfo",
    "SecretFileError",
    "SessionLost",
    "SignalTimeout",
    "SpecError",
    "StaleAttempt",
    "StallEvent",
    "StateDirError",
    "Status",
    "ServerUnreachable",
    "Supervisor",
    "SupervisorBusy",
    "SupervisorClosed",
    "TeammateEnded",
    "TeammateRestarted",
    "TeammateError",
    "TeammateHandle",
    "TeammateProxy",
    "TranscriptEvent",
    "UnitContext",
    "UnknownKind",
    "UnknownWork",
    "UnloadableValue",
    "UnstorableValue",
    "ValueVersionMismatch",
    "WorkActor",
    "WorkExpired",
    "WorkFailed",
    "WorkHandle",
    "WorkKilled",
    "WorkRecord",
    "WorkunitsError",
    "WrongType",
    "connect",
    "connect_async",
    "current",
    "is_terminal",
    "is_valid_id",
    "mint_id",
    "read_transcript",
    "render_transcript",
}

TESTING = {
    "ChangeLog",
    "LifecycleMachine",
    "ManualClock",
    "NotRunning",
    "ScriptSpec",
    "ScriptedDriver",
    "ScriptedLifecycleMachine",
    "ScriptedWork",
    "UnitModel",
}


ACTORS = {
    "AgentActor",
    "AgentSpec",
    "Limits",
    "MonitorSpec",
    "PooledAgentActor",
    "ProcessExited",
    "ProcessLost",
    "ProcessSpawnFailed",
    "ProcessWatch",
    "ShellActor",
    "ShellSpec",
    "SpawnExec",
    "TeammateSpec",
    "UnitBinding",
    "WorkActor",
}

SUPERVISOR = {"Mailbox", "MailboxClosed", "Supervisor", "WorkHandle"}


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (workunits, WORKUNITS),
        (workunits.testing, TESTING),
        (workunits.actors, ACTORS),
        (workunits.supervisor, SUPERVISOR),
    ],
)
def test_all_lists_exactly_the_public_names(module: object, expected: set[str]) -> None:
    assert set(module.__all__) == expected  # type: ignore[attr-defined]
    for name in expected:
        assert getattr(module, name) is not None


def test_the_http_client_names_resolve_with_the_http_extra() -> None:
    # Public, but not in __all__: they need httpx, and ``import *`` must not.
    pytest.importorskip("httpx", reason="the HTTP client needs workunits[http]")
    from workunits._client.http_client import HttpClient, HttpHandle  # noqa: PLC0415

    assert (workunits.HttpClient, workunits.HttpHandle) == (HttpClient, HttpHandle)
    assert {"HttpClient", "HttpHandle"} <= set(dir(workunits))


def test_without_the_http_extra_a_star_import_works_and_the_client_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['httpx'] = None\n"  # as if httpx were not installed
        "from workunits import *\n"
        "import workunits\n"
        "try:\n"
        "    workunits.HttpClient\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, '|', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == (
        "httpx | the HTTP client needs httpx: pip install 'workunits[http]'"
    )


def test_public_names_do_not_leak_private_modules() -> None:
    for name in workunits.__all__:
        assert not name.startswith("_")


def test_errors_share_one_root() -> None:
    for name in WORKUNITS:
        value = getattr(workunits, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            if name == "Cancelled":
                continue
            assert issubclass(value, workunits.WorkunitsError), name
    assert issubclass(workunits.testing.NotRunning, workunits.WorkunitsError)
    assert not issubclass(workunits.Cancelled, Exception)


def test_the_testing_module_loads_the_state_machines_on_first_use() -> None:
    module = importlib.reload(workunits.testing)
    assert module.LifecycleMachine.__name__ == "LifecycleMachine"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        module.Nope  # noqa: B018


SUPERVISOR_SIDE = (
    "pykka",
    "sqlite3",
    "asyncio",
    "workunits.supervisor",
    "workunits.actors",
    "workunits._client.ledger_client",
    "workunits._ledger",
)


def test_the_unit_runtime_loads_neither_the_supervisor_nor_sqlite() -> None:
    # What the zygote preloads is copied on write by every fork (see _util.lazy); a
    # stray import of the supervisor or the ledger's store makes each unit slower.
    code = (
        "import sys, workunits, workunits._zygote.start, workunits._unit.child, "
        "workunits._unit.monitor, workunits._unit.teammate; "
        f"print(sorted(m for m in {SUPERVISOR_SIDE!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_lazy_names_resolve_once_and_are_listed() -> None:
    assert "Supervisor" in dir(workunits)
    assert workunits.Supervisor is workunits.supervisor.facade.Supervisor
    assert "Supervisor" in vars(workunits)  # stored: the next read is a plain attribute
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        workunits.Nope  # noqa: B018


def test_a_running_agent_has_loaded_nothing_of_the_supervisor_side(tmp_path: Path) -> None:
    names = SUPERVISOR_SIDE

    def modules_seen_by_the_unit() -> list[str]:
        # A nested function is pickled by value: the unit does not import this
        # test module (which imports the supervisor) to run it.
        return sorted(m for m in names if m in sys.modules)

    with workunits.Supervisor(state_dir=tmp_path / "state") as sup:
        seen = sup.agent(modules_seen_by_the_unit).result(timeout=30)
    # asyncio is allowed to be absent or present in a user's unit; the runtime
    # itself must not bring in the supervisor, the actors, pykka or SQLite.
    assert [m for m in seen if m != "asyncio"] == []


def _parameters(fn: object) -> list[tuple[str, object, object]]:

    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
    ]


_WITH_TWINS = [
    workunits.Supervisor,
    workunits.WorkHandle,
    workunits.TeammateHandle,
    workunits.Client,
    workunits.ClientHandle,
    workunits.Mailbox,
]


@pytest.mark.parametrize("cls", _WITH_TWINS, ids=lambda cls: cls.__name__)
def test_every_async_twin_takes_what_its_sync_twin_takes(cls: type) -> None:
    """An option added to ``shell`` and forgotten on ``shell_async`` fails here."""
    twins = [name for name in dir(cls) if name.endswith("_async") and not name.startswith("_")]
    assert twins, f"{cls.__name__} has no async twins"
    for name in twins:
        sync = getattr(cls, name.removesuffix("_async"), None)
        assert sync is not None, f"{cls.__name__}.{name} has no sync twin"
        assert _parameters(getattr(cls, name)) == _parameters(sync), (
            f"{cls.__name__}.{name} does not take what {name.removesuffix('_async')} takes"
        )


def test_the_http_client_async_twins_take_what_their_sync_twins_take() -> None:
    pytest.importorskip("httpx", reason="the HTTP client needs workunits[http]")
    from workunits._client.http_client import HttpClient, HttpHandle  # noqa: PLC0415

    for cls in (HttpClient, HttpHandle):
        test_every_async_twin_takes_what_its_sync_twin_takes(cls)
