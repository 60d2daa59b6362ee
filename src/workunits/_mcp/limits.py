"""Per-server limits: what one model may start, and how much comes back per call.

A model's context is small and its client gives each tool call a timeout
(often 60 s or more; some use 30 s). So every tool answers within
``max_wait`` seconds, returns at most ``max_output`` bytes of a unit's
output per call (cut with a note on how to read on), and the server runs at
most ``max_running`` units at once that it started itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from workunits._core.errors import SpecError

DEFAULT_MAX_RUNNING = 16
DEFAULT_MAX_OUTPUT = 32 << 10
DEFAULT_MAX_WAIT = 30.0
MAX_PAGE = 200  # units per list_units page
MAX_NOTICES = 100  # notices per take_notices call


@dataclass(frozen=True, slots=True)
class Limits:
    """The operator's limits (``workunits mcp --max-running/--max-output/--max-wait``)."""

    max_running: int = DEFAULT_MAX_RUNNING
    max_output: int = DEFAULT_MAX_OUTPUT
    max_wait: float = DEFAULT_MAX_WAIT

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise SpecError(f"--max-running must be at least 1, got {self.max_running}")
        if not 256 <= self.max_output <= 16 << 20:
            raise SpecError(
                f"--max-output must be between 256 bytes and 16 MiB, got {self.max_output}"
            )
        if not 0 < self.max_wait <= 3600:
            raise SpecError(f"--max-wait must be between 0 and 3600 seconds, got {self.max_wait}")

    def wait(self, asked: float | None) -> float:
        """The seconds a waiting tool may wait: what it asked for, at most ``max_wait``."""
        if asked is None:
            return self.max_wait
        return max(0.0, min(float(asked), self.max_wait))

    def output(self, asked: int | None) -> int:
        """The output bytes a call may return: what it asked for, at most ``max_output``."""
        if asked is None:
            return self.max_output
        return max(1, min(int(asked), self.max_output))
