"""Public names that a package resolves on first use (PEP 562 ``__getattr__``).

Unit processes are forked from a zygote that preloads only the unit runtime.
Every module the zygote holds makes each fork slower (measured: a trivial fork
round trip 2.6 ms from a lean parent, 3.9 ms from one holding the supervisor,
the ledger and asyncio), so the packages whose public names live in heavy
modules -- the supervisor, the client, the ledger's SQLite store -- import
them when a name is first read, not when the package is.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; ``where`` maps a name to ``module[:attr]``.

    A resolved name is stored in ``namespace`` (the package's globals), so the
    import happens once and later reads are plain attribute reads.
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook, by name
        target = where.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = target.partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807 - its companion
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
