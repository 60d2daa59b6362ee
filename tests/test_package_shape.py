"""Issue 37: no hand-written class is a god object, and no hand-written module a drawer.

The generated files (``_generated.py``, written by ``tools/gen_surfaces.py``) are the
one exception: a surface's generated base holds every verb it offers, and its twins.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import workunits

pytestmark = pytest.mark.timeout(60)

ROOT = Path(workunits.__file__).parent
MAX_METHODS = 50
MAX_LINES = 800


def _hand_written() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if p.name != "_generated.py"]


def test_no_hand_written_class_has_more_than_50_methods() -> None:
    too_big = []
    for path in _hand_written():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = [
                    n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
                if len(methods) > MAX_METHODS:
                    too_big.append(f"{path.relative_to(ROOT)}: {node.name}, {len(methods)}")
    assert too_big == []


def test_no_hand_written_module_is_over_800_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}: {lines}"
        for path in _hand_written()
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MAX_LINES
    ]
    assert too_long == []


def test_the_package_root_holds_no_private_module() -> None:
    private = [p.name for p in ROOT.glob("_*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert private == []
