"""One module per kind of work unit; ``WorkActor`` is their common base."""

from workunits.actors.base import UnitBinding, WorkActor
from workunits.actors.shell import ShellActor, ShellSpec

__all__ = ["ShellActor", "ShellSpec", "UnitBinding", "WorkActor"]
