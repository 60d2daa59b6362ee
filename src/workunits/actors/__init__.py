"""The custom-kind API: ``WorkActor`` (one actor per unit), ``UnitBinding``, and the specs.

A kind is a ``WorkActor`` subclass registered with its own prefix letter
(``Supervisor(kinds={"x": MyActor})``); ``ShellActor`` and ``AgentActor`` are
the built-in kinds to read or extend, and a subclass of ``PooledAgentActor`` is
a kind whose every unit runs in a worker of the supervisor's pool. Its hooks:
``launch`` and ``signal_work`` (required), ``launch_early`` (launch in the
supervisor's thread, before the actor's own starts), ``end_on_exit`` (a zygote
process's exit ends the unit without passing through the actor), and the class
methods for specs and the ledger (``validate_spec``, ``actor_for``,
``to_durable``, ``from_durable``, ``resumable``). A process is started through
``self.unit.zygote`` with ``self.process_watch()`` as its events.
"""

from workunits._wire.actor_messages import ProcessExited, ProcessLost, ProcessSpawnFailed
from workunits._wire.specs import AgentSpec, MonitorSpec, ShellSpec, TeammateSpec
from workunits._wire.zygote_protocol import Limits, SpawnExec
from workunits.actors.agent import AgentActor
from workunits.actors.base import UnitBinding, WorkActor
from workunits.actors.pooled import PooledAgentActor
from workunits.actors.process_events import ProcessWatch
from workunits.actors.shell import ShellActor

__all__ = [
    "AgentActor",
    "AgentSpec",
    "Limits",
    "MonitorSpec",
    "PooledAgentActor",
    "ProcessExited",
    "ProcessLost",
    "ProcessSpawnFailed",
    "ProcessWatch",
    "ShellActor",
    "ShellSpec",
    "SpawnExec",
    "TeammateSpec",
    "UnitBinding",
    "WorkActor",
]
