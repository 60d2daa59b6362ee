"""WorkHandle: what a ``Supervisor``'s submit returns; a thin view of one unit through it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workunits._surface._generated import WorkHandleVerbs

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


class WorkHandle(WorkHandleVerbs):
    """A submitted unit: its ``id``, ``created``, and the supervisor calls that take it."""

    __slots__ = ()

    def __init__(self, supervisor: Supervisor, work_id: str, *, created: bool = True) -> None:
        super().__init__(supervisor, work_id, created=created)

    @property
    def supervisor(self) -> Supervisor:
        """The supervisor the unit was submitted to."""
        return self._surface
