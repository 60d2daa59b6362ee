"""The docs keep up with the code: nothing that exists is called planned, no figure goes stale.

A page that says a feature is "planned", "not yet" there or "coming" must not
name anything the package has: a public name of ``workunits``, a method of
its main classes, an option of ``Supervisor``/``connect``, a command of the
CLI -- nor a feature word the package has shipped (PostgreSQL, schedules,
signals, timers, claims). And figures that go stale with every commit (how
many tests there are) are not written in prose: they disagreed across pages.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import workunits as wu
from workunits._cli import cli
from workunits._core.mailbox import Mailbox
from workunits._unit.context import UnitContext

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# Said of something that does not exist (yet).
_FUTURE = re.compile(
    r"\bplanned\b"
    r"|\bnot yet (?:supported|implemented|available|possible|there|offered|built)\b"
    r"|\bno\b[^.|]*\byet\b"
    r"|\bcoming soon\b|\bin a future (?:release|version)\b|\bTODO\b",
    re.IGNORECASE,
)
# Features shipped, by the words a page would use for them.
_SHIPPED = re.compile(
    r"\bpostgres(ql)?\b|\bschedules?\b|\bsignals?\b|\btimers?\b|\btake\(\)|\bclaims?\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"`([A-Za-z_][\w.]*)(?:\(\))?`")
# Test counts ("1,600 tests", "~800 tests"): stale at the next commit.
_TEST_COUNT = re.compile(r"[~≈]?\b\d[\d,]*\+?\s+(?:unit\s+)?tests\b", re.IGNORECASE)


def _public_names() -> set[str]:
    names = set(wu.__all__)
    for owner in (wu.Supervisor, wu.Client, UnitContext, Mailbox, wu.WorkHandle):
        names |= {n for n in dir(owner) if not n.startswith("_")}
    for call in (wu.Supervisor.__init__, wu.connect):
        names |= set(inspect.signature(call).parameters)
    names |= set(cli.commands)
    return names - {"self", "kwargs", "args"}


def _sentences(page: Path) -> list[tuple[int, str]]:
    """(first line, text) of each sentence of the page's prose, code blocks left out.

    An admonition (``!!! note "Planned"``) is one piece with its body: its title
    speaks for all of it.
    """
    paragraphs: list[tuple[int, list[str]]] = []
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or not line.strip():
            paragraphs.append((number + 1, []))
            continue
        if line.lstrip().startswith("|"):  # a table row stands alone
            paragraphs += [(number, [line.strip()]), (number + 1, [])]
            continue
        if not paragraphs or (not paragraphs[-1][1] and paragraphs[-1][0] != number):
            paragraphs.append((number, []))
        paragraphs[-1][1].append(line.strip())
    out: list[tuple[int, str]] = []
    for number, lines in paragraphs:
        text = " ".join(lines)
        if not text:
            continue
        if text.startswith("!!!"):
            out.append((number, text))
        else:
            out += [(number, part) for part in re.split(r"(?<=[.;])\s+", text)]
    return out


def test_no_page_calls_planned_what_exists() -> None:
    public = _public_names()
    stale = []
    for page in PAGES:
        if page.name == "design.md":
            continue  # the architecture, written ahead of the code on purpose
        for number, text in _sentences(page):
            if not _FUTURE.search(text):
                continue
            names = {m.group(1).rsplit(".", 1)[-1] for m in _NAME.finditer(text)}
            shipped = sorted(names & public) + [m.group(0) for m in _SHIPPED.finditer(text)]
            if shipped:
                where = page.relative_to(ROOT)
                stale.append(f"{where}:{number} calls {shipped} future: {text.strip()!r}")
    assert not stale, "\n".join(stale)


def test_no_page_writes_a_test_count_in_prose() -> None:
    counts = [
        f"{page.relative_to(ROOT)}:{number}: {m.group(0)!r}"
        for page in PAGES
        for number, text in _sentences(page)
        for m in _TEST_COUNT.finditer(text)
    ]
    assert not counts, "test counts go stale; say what the tests do instead:\n" + "\n".join(counts)


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("Claims and acknowledgements: a `take()` is planned.", True),
        ("No timers, schedules or signals in the durable sense yet.", True),
        ("the ledger (SQLite in the state dir; Postgres is planned)", True),
        ("Sandboxes on macOS are planned.", False),
        ("`sup.schedule` fires each due time once.", False),
    ],
)
def test_the_check_itself(text: str, flagged: bool) -> None:
    public = _public_names()
    future = bool(_FUTURE.search(text))
    names = {m.group(1).rsplit(".", 1)[-1] for m in _NAME.finditer(text)}
    assert (future and bool(names & public or _SHIPPED.search(text))) is flagged
