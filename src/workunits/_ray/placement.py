"""What the remote kind's actor needs from a spec: how to place the work on Ray.

Two sorts of work run on Ray: a task (``RemoteSpec``, the ``r`` kind's
``RemoteActor``) and a teammate held in a Ray actor (``RemoteTeammateSpec``, a
``t`` unit run by ``RemoteTeammateActor``, a subclass). Each spec says how it is
placed and ended; the actor does the rest (transcript, reports, one outcome).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from workunits._ray.runtime import RayApi
    from workunits._ray.worker.frames import RemoteCall


class Placement(Protocol):
    """Work placed on Ray. Methods run in the unit's RemoteActor thread and return at once."""

    @property
    def stream(self) -> Any:
        """The unit's Ray streaming generator (an ``ObjectRefGenerator``)."""
        ...

    def kill(self) -> None:
        """End the work now (``ray.cancel(force=True)`` / ``ray.kill``)."""
        ...

    def cancel(self) -> None:
        """Ask the work to stop; ``kill`` follows after the grace if it does not."""
        ...

    def release(self) -> None:
        """The unit is terminal: free what is left of it on Ray."""
        ...


class RemoteWork(ABC):
    """Base of remote specs: built in the caller's thread, placed in the unit's actor thread."""

    __slots__ = ()

    payload: bytes  # what the worker runs: cloudpickled (callable or class, args, kwargs)
    name: str
    ray_options: dict[str, Any]  # resources etc. for ``.options()``, checked at build
    output_cap: int

    @abstractmethod
    def place(self, api: RayApi, call: RemoteCall) -> Placement:
        """Submit the work to Ray; raises if Ray refuses it."""
