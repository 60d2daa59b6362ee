"""Helpers for the escape suite: an attempt run as a shell unit and as an agent, and skips
that name the kernel feature a machine lacks.

Run against a tree from before sandboxes (no ``workunits._sandbox``), the
default cases run unchanged and fail, each naming the escape that went through.

An attempt is a Python snippet that tries one escape and raises OSError when the
kernel refuses it. ``ESCAPED`` is what it prints (a shell unit) or returns (an
agent) when it got through; ``BLOCKED: ...`` names the refusal. The snippet runs
the same way in both: as ``python -c`` exec'd by a shell unit (the command path:
a keeper, or a fork that execs itself) and in an agent's own process (the fork
path), so each path's confinement is tested.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import cloudpickle
import pytest

import workunits as wu

try:
    from workunits._sandbox.probe import Machine
except ImportError:  # a tree from before sandboxes: every case runs, to be seen failing
    Machine = None  # type: ignore[assignment,misc]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ESCAPED = "ESCAPED"
BLOCKED = "BLOCKED"
WAIT = 60.0
HOWS = ("shell", "agent")

_PRELUDE = """
import ctypes, errno, os, signal, socket, sys
"""


def attempt(code: str, values: dict[str, Any]) -> str:
    """In a unit: run ``code`` with ``values`` as its globals; ESCAPED or BLOCKED: why."""
    scope: dict[str, Any] = dict(values)
    try:
        exec(textwrap.dedent(_PRELUDE + code), scope)  # noqa: S102 - the test's own snippet
    except OSError as exc:
        return f"{BLOCKED}: {type(exc).__name__}: {exc}"
    return ESCAPED


def _shell_program(code: str, values: dict[str, Any]) -> str:
    body = textwrap.dedent(_PRELUDE + code)
    return (
        f"import sys\nscope = {values!r}\ntry:\n    exec({body!r}, scope)\n"
        "except OSError as exc:\n"
        "    print('BLOCKED: ' + type(exc).__name__ + ': ' + str(exc))\n"
        "else:\n    print('ESCAPED')\n"
    )


def run(
    sup: wu.Supervisor,
    how: str,
    code: str,
    *,
    sandbox: wu.Sandbox | None = None,
    cwd: str | None = None,
    **values: Any,
) -> str:
    """Try ``code`` in a unit of kind ``how`` (shell or agent); its verdict line."""
    # Only when given: the default cases also run on a tree from before sandboxes
    # (to see each fail there; see the module docstring).
    options: dict[str, Any] = {} if sandbox is None else {"sandbox": sandbox}
    if how == "shell":
        argv = [sys.executable, "-c", _shell_program(code, values)]
        handle = sup.shell(argv, cwd=cwd, **options)
        record = sup.wait(handle.id, timeout=WAIT)
        text = record.output_tail.decode(errors="replace").strip()
        assert record.status is wu.Status.COMPLETED, (record.describe_end(), text)
        return text.splitlines()[-1] if text else ""
    assert cwd is None
    result = sup.result(sup.agent(attempt, code, values, **options).id, timeout=WAIT)
    assert isinstance(result, str)
    return result


def machinery(sup: wu.Supervisor) -> Any:
    """The supervisor's processes and threads (``_runtime`` on a tree from before them)."""
    return getattr(sup, "_machinery", None) or sup._runtime  # type: ignore[attr-defined]


def blocked(verdict: str) -> bool:
    return verdict.startswith(BLOCKED)


def need(feature: Callable[[Machine], str | None]) -> Machine:
    """Skip, naming the missing kernel feature, when this machine lacks what a case needs.

    On a tree from before sandboxes (no probe) nothing is skipped: each case runs
    and fails there, which is how the suite was checked against the old code.
    """
    if Machine is None:
        return None  # type: ignore[return-value]
    machine = Machine.probe()
    why = feature(machine)
    if why is not None:
        pytest.skip(f"this machine cannot close this case: {why}")
    return machine


def namespace(machine: Machine) -> str | None:
    return None if machine.namespace else machine.namespace_missing


def landlock(abi: int) -> Callable[[Machine], str | None]:
    def check(machine: Machine) -> str | None:
        if machine.landlock >= abi:
            return None
        return f"needs Landlock ABI {abi}; this kernel has {machine.landlock or 'none'}"

    return check


def seccomp(machine: Machine) -> str | None:
    return None if machine.seccomp else "needs seccomp and a filter for this CPU"


def pids_limit(machine: Machine) -> str | None:
    if machine.cgroup_pids or (machine.uid != 0 and machine.user_namespaces):
        return None
    return "needs a pids cgroup, or user namespaces for a user other than root"


def root(machine: Machine) -> str | None:
    return None if machine.uid == 0 else "a case for root's units only"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
