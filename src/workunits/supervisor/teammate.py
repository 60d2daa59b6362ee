"""TeammateHandle and its proxy: talking to a teammate from the application.

Every call goes through the ``Supervisor`` (the caller's thread); see
``Supervisor.ask`` for how an answer comes back without any actor waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from workunits._wire.frames import ProxyCall
from workunits.supervisor._generated import TeammateHandleTwins

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


class TeammateHandle(TeammateHandleTwins):
    """A handle on a teammate unit (``t…``): ``tell``, ``ask``, ``proxy``, ``stop``.

    A ``WorkHandle`` too; its ``_async`` twins come from ``supervisor/_generated.py``.
    """

    __slots__ = ("cls",)

    def __init__(
        self,
        supervisor: Supervisor,
        work_id: str,
        cls: type[Any] | None = None,
        *,
        created: bool = True,
    ) -> None:
        super().__init__(supervisor, work_id, created=created)
        self.cls = cls  # known when this process created it; lets proxy() check method names

    def tell(self, message: Any) -> None:
        """Queue ``message`` for ``on_receive``; TeammateEnded if it has ended or is ending."""
        self.supervisor.tell(self.id, message)

    def ask(self, message: Any, timeout: float | None = None) -> Any:
        """The answer of ``on_receive(message)``, or the exception it raised, raised here."""
        return self.supervisor.ask(self.id, message, timeout)

    def ask_future(self, message: Any) -> Future[Any]:
        """Like ``ask``, returning at once with a future of the answer."""
        return self.supervisor.ask_future(self.id, message)

    def proxy(self) -> TeammateProxy:
        """``proxy.method(*args)`` calls ``method`` in the teammate and returns a Future."""
        return TeammateProxy(self)

    def stop(self, timeout: float | None = None) -> Any:
        """Stop after the messages already sent (ends ``completed``); what ``on_stop()`` returned.

        That is ``result()``: decoded, or WorkKilled / WorkFailed raised if it did
        not end ``completed``. NotFinished if it has not ended after ``timeout``
        (a handler is stuck: ``kill()`` it).
        """
        self.supervisor.stop(self.id)
        return self.supervisor.result(self.id, timeout)


class TeammateProxy:
    """Public methods of a teammate as calls that return ``concurrent.futures.Future``.

    Only method calls cross: reading an attribute of the remote instance is not
    supported (wrap it in a method). Names starting with ``_`` are refused, so
    tools probing for ``__iter__`` or ``_repr_html_`` never reach the teammate.
    """

    __slots__ = ("_handle",)

    def __init__(self, handle: TeammateHandle) -> None:
        self._handle = handle

    def __repr__(self) -> str:
        return f"<TeammateProxy {self._handle.id}>"

    def __getattr__(self, name: str) -> Callable[..., Future[Any]]:
        if name.startswith("_"):
            raise AttributeError(name)
        cls = self._handle.cls
        if cls is not None and not callable(getattr(cls, name, None)):
            raise AttributeError(f"{cls.__qualname__} has no method {name!r}")
        handle = self._handle

        def call(*args: Any, **kwargs: Any) -> Future[Any]:
            return handle.ask_future(ProxyCall(name, args, kwargs))

        call.__name__ = name
        return call
