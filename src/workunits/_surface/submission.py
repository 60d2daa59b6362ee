"""``Submission``: what a submit verb hands its surface -- and the spec built from it, once.

A generated submit verb (``Supervisor.shell``, ``Client.agent``,
``UnitContext.teammate``...) puts its arguments into a ``Submission``: the
call's target, its arguments, its kind's options (``spec``) and the unit's own
options (``UnitOptions``, generated from ``options.OPTIONS``). The surface's
transport then builds the spec here (``build``) -- the same checks and the same
errors whichever surface was called -- and carries the submit out: an ask of
the supervisor actor, a ledger row, an HTTP body, a spawn request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workunits._core.errors import SpecError
from workunits._core.restart import Restart, check_restart
from workunits._core.sandbox import Sandbox
from workunits._surface.options import UNIT_OPTIONS
from workunits._wire.specs import AgentSpec, MonitorSpec, ShellSpec, TeammateSpec, check_bytes
from workunits._wire.submits import check_attempts, check_not_before

if TYPE_CHECKING:
    from workunits._surface._generated import UnitOptions

LETTERS = {
    "shell": "b",
    "agent": "a",
    "workflow": "w",
    "dream": "d",
    "monitor": "m",
    "teammate": "t",
    "remote": "r",
}


@dataclass(frozen=True, slots=True)
class Submission:
    """One call of a submit verb, with every option (defaults filled in)."""

    verb: str
    target: Any  # the command, callable, class or source; the kind's letter for ``submit``
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    spec: Mapping[str, Any]  # the kind's own options, by name
    unit: UnitOptions

    @property
    def letter(self) -> str:
        """The kind's letter: the verb's, or the one ``submit(kind, spec)`` names."""
        return str(self.target) if self.verb == "submit" else LETTERS[self.verb]


@dataclass(frozen=True, slots=True)
class Built:
    """A submission's spec, built and checked in the caller's thread (pickling may import),
    and the unit's options as the submit carries them: the description given or the
    kind's default (the command, the callable), the sandbox with its memory limit."""

    letter: str
    spec: Any
    options: UnitOptions
    restart: Restart | None = None

    @property
    def description(self) -> str:
        return self.options.description or ""


def built(
    sub: Submission,
    letter: str,
    spec: Any,
    description: str,
    restart: Restart | None = None,
    *,
    memory_limit: int | None = None,
) -> Built:
    """``Built`` for ``sub``: ``description`` unless one was given; ``memory_limit`` put in
    its sandbox (``with_memory``)."""
    given = sub.unit.description
    options = dataclasses.replace(
        sub.unit,
        description=description if given is None else given,
        sandbox=with_memory(sub.unit.sandbox, memory_limit),
    )
    return Built(letter, spec, options, restart)


def with_memory(sandbox: Sandbox | None, memory_limit: int | None) -> Sandbox | None:
    """``memory_limit=N``, a spelling of ``Sandbox(memory=N)``, put in ``sandbox``."""
    if memory_limit is None:
        return sandbox
    check_bytes("memory_limit", memory_limit)
    if sandbox is None:
        return Sandbox(memory=memory_limit)
    if not isinstance(sandbox, Sandbox):
        raise SpecError(f"sandbox must be a wu.Sandbox or None, got {type(sandbox).__name__}")
    if not sandbox.confined or sandbox.memory not in (None, memory_limit):
        raise SpecError(
            "give the memory limit once: memory_limit=N is Sandbox(memory=N); "
            f"got memory_limit={memory_limit} with sandbox={sandbox!r}"
        )
    return dataclasses.replace(sandbox, memory=memory_limit)


def build(sub: Submission) -> Built:
    """The spec of a built-in kind, local to this machine (``remote`` needs a supervisor).

    SpecError for a bad argument, naming it, before any ID exists.
    """
    o = sub.spec
    if sub.verb == "submit":
        return built(sub, sub.letter, sub.args[0], "")
    if sub.verb == "shell":
        shell = ShellSpec.build(
            sub.target,
            cwd=o["cwd"],
            env=o["env"],
            output_cap=o["output_cap"],
            on_lost=o["on_lost"],
            log=o["log"],
            keep_output=o["keep_output"],
            stdin=o["stdin"],
        )
        return built(sub, "b", shell, shell.describe())
    if sub.verb == "monitor":
        (pattern,) = sub.args
        monitor = MonitorSpec.for_source(sub.target, pattern, rate_limit=o["rate_limit"])
        return built(sub, "m", monitor, monitor.name)
    if sub.verb == "teammate":
        restart = teammate_restart(sub)
        if o["remote"]:
            raise SpecError("remote=True teammates are started by a supervisor's process")
        if o["resources"] is not None:
            raise SpecError("resources are for remote teammates (remote=True)")
        # Its memory limit is its sandbox's (``with_memory``), as for agents.
        mate = TeammateSpec.for_class(sub.target, sub.args, dict(sub.kwargs))
        return built(sub, "t", mate, mate.name, restart, memory_limit=o["memory_limit"])
    if sub.verb not in ("agent", "workflow", "dream"):
        raise SpecError(f"{sub.verb} units are started by a supervisor's process")
    agent = AgentSpec.build(
        sub.target,
        sub.args,
        dict(sub.kwargs),
        output_cap=o["output_cap"],
        reuse=o.get("reuse", False),
        idle_priority=sub.verb == "dream",
    )
    return built(sub, sub.letter, agent, agent.name, memory_limit=o["memory_limit"])


def teammate_restart(sub: Submission) -> Restart | None:
    """A teammate's restart policy (None for ``temporary``), checked before its spec."""
    o = sub.spec
    policy = check_restart(o["restart"], o["max_restarts"], o["within"])
    if policy is not None and o["remote"]:
        raise SpecError(
            "restart= is for teammates in their own process here, not remote=True ones "
            "(Ray restarts its own actors: use Ray's max_restarts)"
        )
    return policy


def check_unit_options(options: UnitOptions, now: float) -> UnitOptions:
    """Refuse a bad unit option (SpecError naming it: the same words on every path).

    Returns them with ``max_attempts`` agreed with ``retry`` (one counter) and
    ``not_before`` as seconds since the epoch (``now`` + a delay, or a time).
    """
    for option in UNIT_OPTIONS:
        if option.check is not None:
            option.check(getattr(options, option.name))
    max_attempts = check_attempts(options.retry, options.max_attempts)
    start_at = check_not_before(options.not_before, now)
    return dataclasses.replace(options, max_attempts=max_attempts, not_before=start_at)
