"""What each firing of a schedule starts: its kind's letter and spec, built once."""

from __future__ import annotations

from typing import Any

from workunits._core.errors import SpecError
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, AgentSpec, ShellSpec


def scheduled_spec(
    kind: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, Any]:
    """The letter and spec each firing of a schedule of ``kind`` starts (may import: a thread)."""
    if kind == "shell":
        if args or kwargs:
            raise SpecError("a shell schedule takes one command: no further arguments")
        return "b", ShellSpec.build(target, cwd=None, env=None, output_cap=DEFAULT_OUTPUT_CAP)
    if kind in ("agent", "workflow"):
        return "a" if kind == "agent" else "w", AgentSpec.build(target, args, kwargs)
    raise SpecError(f"a schedule's kind is 'shell', 'agent' or 'workflow', got {kind!r}")
