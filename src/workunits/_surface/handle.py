"""``Handle``: what every submit returns, on every surface -- one unit's ID and its calls.

``WorkHandle`` (a ``Supervisor``'s), ``ClientHandle`` (``wu.connect``),
``HttpHandle`` (``wu.connect("http://...")``) and ``ChildHandle`` (a unit's
children) are all ``Handle``s: the same attributes (``id``, ``created``) and the
same calls, each the surface's call with the unit's ID. Each surface's handle
gets these calls again with the surface's own types, and their ``_async``
twins, from ``_generated.py`` (written from the methods below by
``tools/gen_surfaces.py``); code that takes any handle reads them here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from workunits._core.record import WorkRecord


class Stream(Iterator[bytes], Protocol):
    """A unit's output as it is written: ``for chunk in stream``; ``close()`` stops early."""

    def close(self) -> None: ...


class AsyncStream(Protocol):
    """``Stream`` for ``async for``."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


class UnitCalls(Protocol):
    """The calls of a surface a handle makes with its unit's ID (positional: ``UnitContext``
    names some of its parameters ``child``)."""

    def get(self, work_id: str, /) -> WorkRecord: ...
    def wait(self, work_id: str, timeout: float | None = ..., /) -> WorkRecord: ...
    def result(self, work_id: str, timeout: float | None = ..., /) -> Any: ...
    def kill(self, work_id: str, /) -> bool: ...
    def cancel(self, work_id: str, grace: float = ..., /) -> bool: ...
    def read_output(self, work_id: str, max_bytes: int | None = ..., /) -> bytes: ...
    def stream(self, work_id: str, /) -> Stream: ...
    def send_input(self, work_id: str, data: bytes | str, eof: bool = ..., /) -> bool: ...


class Handle:
    """A submitted unit: its ``id``, whether this submit ``created`` it, and the calls that take it.

    ``created`` is False when an idempotency key named a unit that already existed.
    ``str(handle)`` is the ID, so a handle goes wherever an ID does.
    """

    __slots__ = ("_surface", "created", "id")

    def __init__(self, surface: Any, work_id: str, *, created: bool = True) -> None:
        self._surface = surface
        self.id = work_id
        self.created = created

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}{'' if self.created else ' (existing)'}>"

    def __str__(self) -> str:
        return self.id

    def _calls(self) -> UnitCalls:
        calls: UnitCalls = self._surface
        return calls

    def get(self) -> WorkRecord:
        """The unit's current record."""
        return self._calls().get(self.id)

    def wait(self, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal; NotFinished after ``timeout``."""
        return self._calls().wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The unit's result, or its failure raised (WorkFailed / WorkKilled)."""
        return self._calls().result(self.id, timeout)

    def kill(self) -> bool:
        """SIGKILL the unit now; False if it was not running."""
        return self._calls().kill(self.id)

    def cancel(self, grace: float = 5.0) -> bool:
        """Ask the unit to stop, SIGKILL after ``grace``; False if it was not running."""
        return self._calls().cancel(self.id, grace)

    def stream(self) -> Stream:
        """Every byte of output once, until the unit ends."""
        return self._calls().stream(self.id)

    def send_input(self, data: bytes | str, eof: bool = False) -> bool:
        """Write ``data`` to the unit's stdin (started with ``stdin=True``); ``eof=True``
        closes it after. False once the unit has ended."""
        return self._calls().send_input(self.id, data, eof)


class HandleCalls(Handle):
    """The calls of a handle whose surface offers them, besides ``Handle``'s (a definition
    for ``tools/gen_surfaces.py``, not a base: a surface's handle has those it offers)."""

    __slots__ = ()

    def read_output(self, max_bytes: int | None = None) -> bytes:
        """The output written since the last read (at most ``max_bytes``)."""
        return self._calls().read_output(self.id, max_bytes)
