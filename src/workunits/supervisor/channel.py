"""``ActorChannel``: the facade's one way to the supervisor actor -- typed asks with a timeout.

``ask(request: Request[R]) -> R``: the request goes through the actor's
``on_receive`` (``ActorRef.ask``, a documented pykka call), and its answer
comes back typed by the request (``supervisor.requests``). Every ask has a
timeout: a pykka future of a stopping actor can stay unresolved, and no call
may hang because of that.
"""

from __future__ import annotations

import contextlib
from typing import Any, TypeVar

import pykka

from workunits._errors import SupervisorClosed
from workunits.supervisor.requests import Request

R = TypeVar("R")


class ActorChannel:
    def __init__(self, ref: pykka.ActorRef[Any], timeout: float) -> None:
        self._ref = ref
        self._timeout = timeout
        self.closed = False  # set by Supervisor.close(): only close() itself asks after it

    def ask(self, request: Request[R]) -> R:
        """The actor's answer to ``request``, in the caller's thread; SupervisorClosed if none."""
        if self.closed:
            raise SupervisorClosed("the supervisor is closed")
        return self.ask_while_closing(request)

    def ask_while_closing(self, request: Request[R]) -> R:
        """``ask`` for ``Supervisor.close()``, which marks the channel closed first."""
        try:
            self._ref.ask(request, timeout=self._timeout)
        except pykka.ActorDeadError:
            raise SupervisorClosed("the supervisor is closed") from None
        except pykka.Timeout:
            raise SupervisorClosed(
                f"the supervisor actor did not answer within {self._timeout} s"
            ) from None
        return request.answered()

    def post(self, request: Request[Any]) -> None:
        """Ask without waiting for the answer (from a finalizer, or an event loop's thread)."""
        if not self.closed:
            with contextlib.suppress(pykka.ActorDeadError):
                self._ref.ask(request, block=False)

    def tell(self, message: object) -> None:
        """A tell that is not a request (the Ticker's tick); dropped once the actor stopped."""
        with contextlib.suppress(pykka.ActorDeadError):
            self._ref.tell(message)
