"""Monitor units (``m``): a watcher whose matching lines become events for its parent.

The unit process (``runtime.monitor.watch``) runs the source and does the
matching and rate limiting; this actor, in its own thread, turns each
``MonitorMatch`` frame into a ``MonitorEvent`` and tells the supervisor, which
puts it in the parent's mailbox (or passes it into an agent parent's process).
Events travel the same FIFO path as the unit's end, so all of them reach the
parent before its one terminal notification.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workunits._errors import SpecError
from workunits._record import MonitorEvent
from workunits._runtime import messages as m
from workunits._runtime.ratelimit import DEFAULT_RATE_LIMIT
from workunits.actors.agent import AgentActor, AgentSpec
from workunits.actors.shell import DEFAULT_OUTPUT_CAP, ShellSpec

SourceArg = str | Sequence[str] | Callable[[], Iterable[str | bytes]]


@dataclass(frozen=True, slots=True)
class MonitorSpec(AgentSpec):
    """An AgentSpec whose call is ``watch(source, pattern, flags, rate_limit)``."""

    @classmethod
    def for_source(
        cls,
        source: SourceArg,
        pattern: str | re.Pattern[str],
        *,
        rate_limit: float | None = DEFAULT_RATE_LIMIT,
    ) -> MonitorSpec:
        """Check and pickle everything now (caller's thread): a SpecError registers nothing."""
        from workunits._runtime.monitor import watch  # noqa: PLC0415 - runtime imports actors

        if callable(source):
            src: Any = source
            what = getattr(source, "__qualname__", None) or repr(source)
        else:
            shell = ShellSpec.build(source, cwd=None, env=None, output_cap=DEFAULT_OUTPUT_CAP)
            src, what = shell.argv, shell.describe()
        text, flags = _pattern(pattern)
        if rate_limit is not None and (
            isinstance(rate_limit, bool)
            or not isinstance(rate_limit, int | float)
            or not (rate_limit > 0 and math.isfinite(rate_limit))
        ):
            raise SpecError(f"rate_limit must be a positive number of events/s, got {rate_limit!r}")
        rate = None if rate_limit is None else float(rate_limit)
        spec = AgentSpec.build(watch, (src, text, flags, rate), {})
        return cls(spec.payload, f"monitor {what} for /{text}/", spec.limits)


def _pattern(pattern: str | re.Pattern[str]) -> tuple[str, int]:
    if isinstance(pattern, re.Pattern):
        if not isinstance(pattern.pattern, str):
            raise SpecError("a monitor's pattern matches text: give a str pattern, not bytes")
        return pattern.pattern, pattern.flags
    if not isinstance(pattern, str):
        raise SpecError(f"pattern must be a str regex, got {type(pattern).__name__}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SpecError(f"pattern {pattern!r} is not a valid regex: {exc}") from None
    return pattern, compiled.flags


@dataclass(frozen=True, slots=True)
class MonitorEventReport:
    """Monitor actor -> supervisor: an event for the monitor's parent."""

    event: MonitorEvent


class MonitorActor(AgentActor):
    kind: ClassVar[str] = "monitor"

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, MonitorSpec):
            raise SpecError(f"a monitor unit needs a MonitorSpec, got {type(spec).__name__}")

    def _from_unit(self, frame: Any) -> None:
        if isinstance(frame, m.MonitorMatch):
            event = MonitorEvent(self.unit.id, frame.line, frame.at, frame.suppressed)
            self.unit.tell_supervisor(MonitorEventReport(event))
        else:
            super()._from_unit(frame)
