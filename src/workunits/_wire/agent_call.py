"""``AgentCall``: one item of a batch submit (``Supervisor.submit_many``).

A call and the options of its own unit; the options every item shares are
given to ``submit_many`` itself. Built in the caller's thread, checked with
the whole batch before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workunits._core.errors import SpecError


@dataclass(frozen=True, slots=True)
class AgentCall:
    """``fn(*args, **kwargs)`` as one agent unit of a batch, with its own ``key``,
    ``description`` and ``timeout`` (seconds the unit may run)."""

    fn: Callable[..., Any] | str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None
    description: str | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.args, tuple):
            raise SpecError(f"AgentCall args must be a tuple, got {type(self.args).__name__}")
        if not isinstance(self.kwargs, Mapping):
            raise SpecError(f"AgentCall kwargs must be a mapping, got {type(self.kwargs).__name__}")
