"""The documentation stays true: docstrings, the reference's coverage, the demo, the version.

The examples themselves run through sybil (conftest.py at the root); the site
is built strict by ``make docs``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import workunits
import workunits.actors
import workunits.testing

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = (workunits, workunits.actors, workunits.testing)
# The Hypothesis machines' rules are documented by the class and the guide, not one by one.
MEMBERS_CHECKED = (workunits, workunits.actors)


def _names(module: ModuleType) -> list[tuple[str, object]]:
    return [(f"{module.__name__}.{name}", getattr(module, name)) for name in module.__all__]


def _own_doc(obj: object) -> str | None:
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    return doc if isinstance(doc, str) and doc.strip() else None


def test_every_public_name_has_its_own_docstring() -> None:
    missing = [name for module in PUBLIC for name, obj in _names(module) if not _own_doc(obj)]
    assert missing == []


def test_every_public_method_of_a_public_class_is_documented() -> None:
    missing = []
    for module in MEMBERS_CHECKED:
        for name, cls in _names(module):
            if not isinstance(cls, type):
                continue
            for attr in dir(cls):
                ours = any(
                    attr in vars(base)
                    for base in cls.__mro__
                    if base.__module__.startswith("workunits")
                )
                if attr.startswith("_") or not ours:
                    continue
                value = inspect.getattr_static(cls, attr)
                if isinstance(value, staticmethod | classmethod):
                    value = value.__func__
                if isinstance(value, property):
                    value = value.fget
                if inspect.isfunction(value) and not inspect.getdoc(getattr(cls, attr)):
                    missing.append(f"{name}.{attr}")
    assert missing == []


def test_the_reference_covers_every_public_name() -> None:
    pages = "\n".join(p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md"))
    shown = {_resolve(p) for p in re.findall(r"^::: (workunits[\w.]*)$", pages, re.MULTILINE)}
    # A name exported twice (workunits.WorkActor is workunits.actors.WorkActor) is shown once.
    missing = [name for module in PUBLIC for name, obj in _names(module) if id(obj) not in shown]
    assert missing == []


def _resolve(path: str) -> int:
    module_name, _, attr = path.rpartition(".")
    return id(getattr(importlib.import_module(module_name), attr))


def test_the_errors_page_says_when_each_error_is_raised() -> None:
    page = (ROOT / "docs" / "reference" / "errors.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", page, re.MULTILINE))
    errors = {
        name
        for name, obj in vars(workunits).items()
        if name in workunits.__all__ and isinstance(obj, type) and issubclass(obj, BaseException)
    }
    errors |= {n for n in workunits.__all__ if n == "MailboxClosed"}
    assert errors <= rows


def test_one_version_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    first_release = re.search(r"^## \[?(\d+\.\d+\.\d+)", changelog, re.MULTILINE)
    assert first_release is not None
    assert workunits.__version__ == project == first_release.group(1)
    assert importlib.metadata.version("workunits") == project
    out = subprocess.run(
        [sys.executable, "-m", "workunits._cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == f"workunits, version {project}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("script", ["agent_tree.py"])
def test_the_demo_runs(script: str, tmp_path: Path) -> None:
    """``make demo`` (the README's first command) runs this script."""
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,  # below the test's own timeout, so a hang shows what it printed
            check=False,
        )
    except subprocess.TimeoutExpired as hung:
        # Captured output is bytes here whatever text= said.
        printed = b"".join(part for part in (hung.stdout, hung.stderr) if isinstance(part, bytes))
        pytest.fail(f"the demo hung; it had printed:\n{printed.decode(errors='replace')}")
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout


def test_the_http_reference_page_is_current() -> None:
    pytest.importorskip("fastapi", reason="the HTTP API needs workunits[http]")
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        http_reference = importlib.import_module("_http_reference")
    finally:
        sys.path.remove(str(ROOT / "docs"))
    rendered = http_reference.render(http_reference.openapi())
    assert http_reference.PAGE.read_text(encoding="utf-8") == rendered, (
        "docs/reference/http.md is stale: run `python docs/_http_reference.py`"
    )
