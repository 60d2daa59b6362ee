"""Follow a unit's Ray stream in a thread of its own and tell the unit's actor what came.

Runs in the supervisor process. A follower thread blocks in Ray (``next`` on the
stream) so that no pykka actor ever does; it only tells. One thread per running
remote unit, next to that unit's actor thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Batch:
    frames: list[Any]


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The generator returned: every frame it yielded has been told before this."""


@dataclass(frozen=True, slots=True)
class StreamFailed:
    lost: bool  # the worker, its node or its actor went away under the unit
    error: str


def follow(stream: Any, tell: Callable[[Any], bool], name: str) -> threading.Thread:
    """Read ``stream`` to its end; ``tell`` returns False once nobody listens any more."""

    def run() -> None:
        import ray  # noqa: PLC0415 - a stream exists only once ray is imported

        try:
            for ref in stream:
                if not tell(Batch(ray.get(ref))):
                    return
        except Exception as exc:  # noqa: BLE001 - how the stream broke decides the outcome
            tell(describe_failure(exc))
            return
        tell(StreamEnded())

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def describe_failure(exc: BaseException) -> StreamFailed:
    """Sort a Ray error into "the unit's process or node went away" (lost) or not."""
    from ray import exceptions as rx  # noqa: PLC0415

    lost_types = (rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError, rx.ActorDiedError)
    # Not lost: OutOfMemoryError (Ray's memory monitor killed the unit for its own use
    # of memory: a crash of the unit, as the OOM killer is for an agent) and the rest.
    lost = isinstance(exc, lost_types)
    text = str(exc).strip() or "(no message)"
    return StreamFailed(lost, f"{type(exc).__name__}: {text}")
