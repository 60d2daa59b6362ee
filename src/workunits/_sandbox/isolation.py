"""The supervisor's side of isolation: each unit's policy, checked, and its confinement.

``Isolation`` holds the supervisor's mode (``isolation="default" | "required"
| "off"``) and what the machine offers (``probe.Machine``, corrected by the
zygote's word on the namespace it made). Its ``policy_for`` is the submit's
check: a child's policy narrowed from its parent's, and a protection the
machine cannot enforce refused (``SandboxUnavailable``) unless the policy
says ``required=False``. Its ``confinement`` turns a running unit's policy
into what its process applies. Runs on the supervisor actor's thread (and
the facade's, for ``check_start``); holds no lock: its state changes once,
when the zygote reports.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from workunits._core.errors import SandboxUnavailable, SpecError
from workunits._core.sandbox import Sandbox
from workunits._sandbox import _libc
from workunits._sandbox.plan import Confinement, python_paths
from workunits._sandbox.probe import Machine
from workunits._sandbox.unit import MODES, Settings

OFF_NOTE = 'isolation: off (Supervisor(isolation="off"))'
ENV_UNIT = "WORKUNITS_UNIT"


@dataclass(frozen=True, slots=True)
class Decided:
    """A unit's policy as it will run, and what of it this machine does not enforce."""

    policy: Sandbox
    enforced: tuple[str, ...]
    unenforced: tuple[str, ...]

    def note(self) -> dict[str, object]:
        """The transcript's first line, and what ``show`` prints."""
        return {
            "policy": self.policy.to_json(),
            "enforced": list(self.enforced),
            "not_enforced": list(self.unenforced),
        }


def check_mode(mode: object) -> str:
    if mode not in MODES:
        raise SpecError(f"isolation must be one of {', '.join(map(repr, MODES))}; got {mode!r}")
    return str(mode)


class Isolation:
    """One supervisor's isolation (see the module docstring)."""

    def __init__(
        self,
        mode: str,
        *,
        state_dir: str,
        secret_files: tuple[str, ...] = (),
        machine: Machine | None = None,
    ) -> None:
        self.mode = check_mode(mode)
        self.on = self.mode != "off"
        self.state_dir = state_dir
        self.secret_files = secret_files
        self.machine = machine or Machine.probe()
        self._read_too = python_paths()
        # What else a confined unit's environment holds (the gateway's address and its
        # token, set by the runtime once the gateway is up).
        self.unit_env: Callable[[str], Mapping[str, str]] = lambda unit_id: {}

    def settings(self) -> Settings:
        """What the zygote is told: the mode, and what the units' namespace hides."""
        return Settings(self.mode, (self.state_dir,), self.secret_files)

    def zygote_reported(self, missing: tuple[str, ...]) -> None:
        """The zygote's word on what it could not make (its handshake)."""
        prefix = "hide-state-dir: "
        namespace = [m.removeprefix(prefix) for m in missing if m.startswith(prefix)]
        self.machine = self.machine.with_namespace(namespace[0] if namespace else None)

    def missing(self) -> list[str]:
        """What of the default protection this machine does not give (empty when off)."""
        return self.machine.missing_defaults() if self.on else []

    def check_start(self) -> None:
        """``isolation="required"``: SandboxUnavailable unless every default protection holds."""
        missing = self.missing()
        if self.mode == "required" and missing:
            raise SandboxUnavailable(
                'isolation="required", but this machine cannot give every default '
                "protection: " + "; ".join(missing) + " (see `workunits doctor`)"
            )

    # -- submits -----------------------------------------------------------------------

    def decide(self, asked: Sandbox | None, parent: Sandbox | None) -> Decided:
        """The policy a new unit runs under: ``asked`` (None: its parent's, or the
        default), narrowed from ``parent``'s; SandboxEscalation when it asks for
        more, SandboxUnavailable when it needs what this machine lacks."""
        if asked is not None and not isinstance(asked, Sandbox):
            raise SpecError(f"sandbox must be a wu.Sandbox or None, got {type(asked).__name__}")
        if not self.on:  # kept as asked (a later supervisor may enforce it), not enforced
            policy = parent.narrowed(asked) if parent is not None else (asked or _DEFAULT)
            return Decided(policy, (), (OFF_NOTE,))
        if parent is None:  # a top-level unit asks for what it likes
            policy = _DEFAULT if asked is None else asked
        else:
            policy = parent.narrowed(asked)
        self._check_paths(policy)
        enforced, missing, needed = _checked(self.machine, policy)
        if needed and policy.required:
            raise SandboxUnavailable(
                "this machine cannot enforce what the unit's sandbox asks for: "
                + "; ".join(needed)
                + " (give the Sandbox required=False to run it without; see `workunits doctor`)"
            )
        return Decided(policy, enforced, missing)

    def _check_paths(self, policy: Sandbox) -> None:
        for name in ("write", "read"):
            for path in getattr(policy, name) or ():
                if not os.path.exists(path):
                    raise SpecError(f"the sandbox's {name} path {path!r} does not exist")
                real = os.path.realpath(path)
                state = os.path.realpath(self.state_dir)
                if real == state or real.startswith(state + os.sep):
                    raise SpecError(
                        f"the sandbox's {name} path {path!r} is inside the state dir, which "
                        "no unit can reach; give a path outside it"
                    )

    # -- launches ----------------------------------------------------------------------

    def confinement(self, unit_id: str, attempt: int, policy: Sandbox | None) -> Confinement | None:
        """What the unit's process applies to itself (None: nothing, it is unconfined)."""
        if not self.on or policy is None or not policy.confined:
            return None
        tmpdir = None
        if policy.write is not None or policy.read is not None:
            tmpdir = tmpdir_of(unit_id, attempt)
        env = {ENV_UNIT: unit_id, **self.unit_env(unit_id)}
        return Confinement.of(policy, tmpdir=tmpdir, env=env, read_too=self._read_too)

    def note(self, policy: Sandbox) -> dict[str, object]:
        """A running unit's policy and what of it is enforced (its transcript's first line)."""
        return dict(_noted(self.machine if self.on else None, policy))

    def notice(self) -> str | None:
        """The one line said at start when something of the default protection is missing."""
        missing = self.missing()
        if not missing:
            return None
        return (
            "workunits: units run with less than full isolation on this machine: "
            + "; ".join(missing)
            + " (see `workunits doctor`)"
        )


class _Undumpable:
    """This process kept not dumpable while any supervisor in it confines units: its
    /proc files (descriptors, environment, memory) closed to the user's other processes,
    units included where Landlock does not hold them back. The setting it found comes
    back when the last such supervisor closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the two fields: a count and a flag, O(1)
        self._holders = 0
        self._was: bool | None = None

    def hold(self) -> None:
        with self._lock:
            if self._holders == 0:
                with contextlib.suppress(OSError):
                    self._was = _libc.dumpable()
                    _libc.set_dumpable(False)
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._was:
                with contextlib.suppress(OSError):
                    _libc.set_dumpable(True)


UNDUMPABLE = _Undumpable()


def refuse_cwd_inside(cwd: str, state_dir: str | os.PathLike[str]) -> None:
    """SpecError for a unit's working directory inside the state dir, which it cannot see."""
    state = os.path.realpath(state_dir)
    real = os.path.realpath(cwd)
    if real == state or real.startswith(state + os.sep):
        raise SpecError(
            f"cwd {cwd!r} is inside the state dir, which no unit can see (it is hidden "
            f"from units); give a working directory outside it"
        )


def hidden_environment(postgres: bool) -> tuple[str, ...]:
    """Variables no unit may see: the runtime's secret file, and a PostgreSQL ledger's
    password (libpq reads it from there)."""
    return ("WORKUNITS_SECRET_FILE", "PGPASSWORD") if postgres else ("WORKUNITS_SECRET_FILE",)


def tmpdir_of(unit_id: str, attempt: int) -> str:
    """A unit attempt's private temp dir (made by its process, removed at its end)."""
    return os.path.join(tempfile.gettempdir(), f"workunits-{os.geteuid()}-{unit_id}-{attempt}")


def say(line: str) -> None:
    """Print a notice on stderr (once per start; the caller decides when)."""
    with contextlib.suppress(OSError, ValueError):  # no stderr (closed): nobody to tell
        print(line, file=sys.stderr, flush=True)


_DEFAULT = Sandbox()  # frozen: one for every unit that asks for nothing


@functools.lru_cache(maxsize=128)
def _checked(
    machine: Machine, policy: Sandbox
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """What of ``policy`` ``machine`` enforces, what not, and what of that is more than
    the default protection. Both are frozen and every submit asks this (a tenth of
    a submit's CPU, profiled), so it is worked out once per pair."""
    enforced, missing = machine.check(policy)
    defaults = set(machine.missing_defaults())
    needed = [m for m in missing if m not in defaults and policy.confined]
    return tuple(enforced), tuple(missing), tuple(needed)


@functools.lru_cache(maxsize=128)
def _noted(machine: Machine | None, policy: Sandbox) -> dict[str, object]:
    """``Isolation.note`` for ``machine`` (None: isolation is off), worked out once per
    pair: every agent's launch asks. Callers get a copy of the top level; the nested
    values are never changed (the note is encoded for the unit's transcript)."""
    if machine is None:
        return Decided(policy, (), (OFF_NOTE,)).note()
    enforced, missing, _ = _checked(machine, policy)
    return Decided(policy, enforced, missing).note()
