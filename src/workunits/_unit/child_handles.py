"""``ChildHandle`` and ``ChildTeammate``: the handles of the units a unit starts.

Every call goes through the unit's context (``wu.current()``), and so through
its channel to the supervisor; they run in the unit's own thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workunits._surface._generated import ChildHandleVerbs

if TYPE_CHECKING:
    from workunits._unit.context import UnitContext


class ChildHandle(ChildHandleVerbs):
    """A child unit started from inside a unit (``ctx.agent``, ``ctx.shell``...)."""

    __slots__ = ()

    def __init__(self, ctx: UnitContext, work_id: str, *, created: bool = True) -> None:
        super().__init__(ctx, work_id, created=created)

    @property
    def ctx(self) -> UnitContext:
        """The context of the unit that started it."""
        return self._surface


class ChildTeammate(ChildHandle):
    """A teammate started from inside a unit: a child handle that also takes messages."""

    __slots__ = ()

    def tell(self, message: Any) -> None:
        """Send ``message`` to the teammate without waiting (``UnitContext.tell``)."""
        self.ctx.tell(self, message)

    def ask(self, message: Any, timeout: float | None = None) -> Any:
        """Send ``message`` and wait for the answer (``UnitContext.ask``)."""
        return self.ctx.ask(self, message, timeout)

    def stop(self, timeout: float | None = None) -> Any:
        """Stop after the messages already sent; what its ``on_stop()`` returned (``result``)."""
        self.ctx.stop(self)
        return self.ctx.result(self, timeout)
