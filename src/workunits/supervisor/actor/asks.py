"""Open asks to teammates: which route waits for which answer. Owned by the SupervisorActor.

An ask is routed with a token; the teammate answers that token, or the teammate
ends and every ask still open to it is failed, or the asker gives up and the
entry is forgotten. So each route is called at most once, and an asker that
still waits is always called: nobody waits on a unit that can no longer answer.

A route is ``route(ok, value)``, run in the supervisor's thread; it must not
block (a pykka tell, an ``Event.set``, a ``call_soon_threadsafe``, an executor
submit). ``ok`` False: the supervisor refused or gave up and ``value`` is the
exception to raise. ``ok`` True: ``value`` is the teammate's ``Answer``, opened
only by the asker (unpickling it runs the teammate's code).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Container
from typing import Any

log = logging.getLogger(__name__)

Route = Callable[[bool, Any], None]


class PendingAsks:
    def __init__(self) -> None:
        self._tokens = itertools.count(1)  # 0 means "a tell": no answer expected
        self._open: dict[str, dict[int, Route]] = {}

    def __len__(self) -> int:
        return sum(len(routes) for routes in self._open.values())

    def add(self, target: str, route: Route) -> int:
        token = next(self._tokens)
        self._open.setdefault(target, {})[token] = route
        return token

    def pop(self, target: str, token: int) -> Route | None:
        routes = self._open.get(target)
        if routes is None:
            return None
        route = routes.pop(token, None)
        if not routes:
            del self._open[target]
        return route

    def pop_all(self, target: str, keep: Container[int] = ()) -> list[Route]:
        """Every route open to ``target`` but those whose token is in ``keep``."""
        routes = self._open.pop(target, {})
        kept = {token: route for token, route in routes.items() if token in keep}
        if kept:
            self._open[target] = kept
        return [route for token, route in routes.items() if token not in keep]

    def is_open(self, target: str, token: int) -> bool:
        return token in self._open.get(target, {})

    def drain(self) -> list[Route]:
        routes = [route for by_token in self._open.values() for route in by_token.values()]
        self._open.clear()
        return routes


def deliver(route: Route, ok: bool, value: Any) -> None:
    """Call a route; a broken one (a closed event loop…) is logged, never raised."""
    try:
        route(ok, value)
    except Exception:
        log.exception("could not deliver an answer to %r", route)
