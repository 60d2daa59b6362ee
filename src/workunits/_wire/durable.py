"""How the built-in kinds' specs are stored in the ledger, and which of them resume.

One place for the conversion, so a supervisor's actor and a ``wu.connect``
client (which imports no actors) write the same row for the same submit, and
so share idempotency keys.
"""

from __future__ import annotations

import os
from typing import Any

from workunits._core.errors import SpecError
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, AgentSpec, Call, ShellSpec, durable_options


def shell_to_durable(spec: ShellSpec, timeout: float | None) -> dict[str, Any]:
    stored: dict[str, Any] = {
        "argv": list(spec.argv),
        "cwd": spec.cwd,
        "env": None if spec.env is None else dict(spec.env),
        "output_cap": spec.output_cap,
        "on_lost": spec.on_lost,
        "timeout": timeout,
    }
    # Only when asked for, so a spec stored before logs existed keeps its hash: a
    # resubmit by key still finds its unit, and one that adds a log conflicts.
    if spec.log is not None:
        stored["log"] = spec.log
    if spec.keep_output:
        stored["keep_output"] = True
    if spec.stdin:
        stored["stdin"] = True
    return stored


def shell_from_durable(stored: Any) -> tuple[ShellSpec, float | None]:
    if not isinstance(stored, dict) or not isinstance(stored.get("argv"), list):
        raise SpecError(f"a stored shell spec is a dict with an argv list, got {stored!r:.80}")
    log = stored.get("log")
    keep_output = stored.get("keep_output", False)
    stdin = stored.get("stdin", False)
    if not (log is None or (isinstance(log, str) and os.path.isabs(log))) or not isinstance(
        keep_output, bool
    ):
        raise SpecError(f"a stored shell spec's log is an absolute path or None: {stored!r:.80}")
    spec = ShellSpec(
        argv=tuple(stored["argv"]),
        cwd=stored.get("cwd"),
        env=stored.get("env"),
        output_cap=int(stored.get("output_cap", DEFAULT_OUTPUT_CAP)),
        on_lost=str(stored.get("on_lost", "fail")),
        log=log,
        keep_output=keep_output,
        stdin=stdin is True,
    )
    return spec, stored.get("timeout")


def shell_resumable(stored: Any) -> bool:
    """A shell runs again after its supervisor died only when it asked to (``on_lost``)."""
    return isinstance(stored, dict) and stored.get("on_lost") == "restart"


def agent_to_durable(spec: AgentSpec, timeout: float | None) -> Any:
    """A ledger Call (stored by import reference when the callable has one), or the pair."""
    call = getattr(spec, "call", None)  # kinds built on agents may have other specs
    if not isinstance(call, Call):
        return (spec, timeout)
    options = durable_options(timeout, spec.limits.memory, spec.output_cap)
    return Call(call.fn, call.args, call.kwargs, options)


def agent_from_durable(stored: Call) -> tuple[AgentSpec, float | None]:
    options = dict(stored.options)
    fn = stored.fn
    if isinstance(fn, str):
        raise SpecError(f"the reference {fn!r} was not resolved")
    spec = AgentSpec.build(
        fn,
        tuple(stored.args),
        dict(stored.kwargs),
        memory_limit=options.get("memory_limit"),
        output_cap=options.get("output_cap", DEFAULT_OUTPUT_CAP),
    )
    return spec, options.get("timeout")


def agent_resumable(spec_format: str) -> bool:
    """An agent stored by import reference can be loaded by a later attempt."""
    return spec_format == "ref"
