"""The custom-kind API: ``WorkActor`` (one actor per unit), ``UnitBinding``, and the specs.

A kind is a ``WorkActor`` subclass registered with its own prefix letter
(``Supervisor(kinds={"x": MyActor})``); ``ShellActor`` and ``AgentActor`` are
the built-in kinds to read or extend.

Provisional: how a process's exit reaches a unit's actor is being reshaped for
speed; the names below stay, the hooks around process events may change.
"""

from workunits._wire.specs import AgentSpec, MonitorSpec, ShellSpec, TeammateSpec
from workunits.actors.agent import AgentActor
from workunits.actors.base import UnitBinding, WorkActor
from workunits.actors.shell import ShellActor

__all__ = [
    "AgentActor",
    "AgentSpec",
    "MonitorSpec",
    "ShellActor",
    "ShellSpec",
    "TeammateSpec",
    "UnitBinding",
    "WorkActor",
]
