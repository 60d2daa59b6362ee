"""What the remote kind's actor needs from a spec: how to place the work on Ray.

``RemoteActor`` is one kind (``r``) for two sorts of remote work, a task
(``RemoteSpec``) and a teammate actor (``RemoteTeammateSpec``); each spec says
how it is placed and ended, and the actor does the rest (transcript, outcome).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from workunits.remote.frames import RemoteCall
    from workunits.remote.runtime import RayApi


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

    def on_frame(self, frame: Any) -> bool:
        """Take a frame only this sort of work sends; False if it is not one."""
        ...

    def release(self, ended: str) -> None:
        """The unit is terminal (``ended`` says how): free what is left on Ray."""
        ...


class RemoteWork(ABC):
    """Base of remote specs: built in the caller's thread, placed in the unit's actor thread."""

    payload: bytes  # what the worker runs: cloudpickled (callable or class, args, kwargs)
    name: str
    ray_options: dict[str, Any]  # resources etc. for ``.options()``, checked at build
    output_cap: int

    @abstractmethod
    def place(self, api: RayApi, call: RemoteCall) -> Placement:
        """Submit the work to Ray; raises if Ray refuses it."""
