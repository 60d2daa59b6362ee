"""The package uses pykka's public API only (issue 12): no private name of pykka's in ``src/``.

A private name is one with a leading underscore (not a dunder). Flagged:
imports of ``pykka._x`` (or ``from pykka import _x``); ``pykka...._x`` reached
through the module; a private method of pykka's actor, ref, future or registry
classes overridden (``def _handle_receive``); and one of their private names
reached on any object (``actor._handle_failure(...)``, ``self._actor_loop``),
but for the few that this package's own classes define too (``self._stop =
threading.Event()``), which only the override rule covers. A pykka release may
change any of them without notice.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pykka

import workunits

SRC = Path(workunits.__file__).parent


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


PYKKA_CLASSES = (
    pykka.Actor,
    pykka.ThreadingActor,
    pykka.ActorRef,
    pykka.ActorProxy,
    pykka.Future,
    pykka.ThreadingFuture,
    pykka.ActorRegistry,
)
# pykka's own private names on its classes (methods and attributes alike).
PRIVATE = frozenset(
    name
    for cls in PYKKA_CLASSES
    for klass in inspect.getmro(cls)
    if klass.__module__.startswith("pykka")
    for name in [*vars(klass), *getattr(klass, "__annotations__", {})]
    if _is_private(name)
)


def _own_attributes(sources: list[tuple[str, str]]) -> frozenset[str]:
    """The names this package's own code assigns on ``self`` (``self._stop = ...``)."""
    return frozenset(
        target.attr
        for source, filename in sources
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    )


def _package() -> list[tuple[str, str]]:
    """Each module of the package: its source and its path from ``src/``."""
    return [
        (path.read_text(), str(path.relative_to(SRC.parent))) for path in sorted(SRC.rglob("*.py"))
    ]


def _rooted_at_pykka(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "pykka"


def private_uses(source: str, filename: str, ours: frozenset[str] = frozenset()) -> list[str]:
    """Each use of a pykka private name in ``source``, as ``file:line: what``.

    ``ours``: private names of pykka's that the package's own classes define too.
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        what: str | None = None
        match node:
            case ast.Import(names=names):
                bad = [a.name for a in names if a.name.startswith("pykka.") and "._" in a.name]
                what = f"import {bad[0]}" if bad else None
            case ast.ImportFrom(module=str(module)) if module.split(".")[0] == "pykka":
                if any(_is_private(part) for part in module.split(".")):
                    what = f"from {module} import"
                elif bad := [a.name for a in node.names if _is_private(a.name)]:
                    what = f"from {module} import {bad[0]}"
            case ast.Attribute(attr=attr) if _is_private(attr):
                if attr in PRIVATE - ours or _rooted_at_pykka(node.value):
                    what = f"attribute {attr}"
            case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) if name in PRIVATE:
                what = f"def {name}"
        if what is not None:
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}: {what}")
    return found


def test_the_scan_finds_each_kind_of_private_use() -> None:
    source = """
import pykka._envelope
from pykka._envelope import Envelope
from pykka import _threading
from pykka import ActorRef
class A(pykka.ThreadingActor):
    def _handle_receive(self, message): ...
    def on_start(self):
        self._actor_loop()
        isinstance(message, pykka.messages._ActorStop)
        self._ours = 1
"""
    uses = [use.split(": ", 1)[1] for use in private_uses(source, "x.py")]
    assert sorted(uses) == sorted(
        [
            "import pykka._envelope",
            "from pykka._envelope import",
            "from pykka import _threading",
            "def _handle_receive",
            "attribute _actor_loop",
            "attribute _ActorStop",
        ]
    )


def test_no_pykka_private_name_in_the_package() -> None:
    package = _package()
    ours = _own_attributes(package)
    assert ours & PRIVATE <= {"_stop", "_actor"}  # a new one: check it is not pykka's
    uses = [use for source, filename in package for use in private_uses(source, filename, ours)]
    assert uses == []
