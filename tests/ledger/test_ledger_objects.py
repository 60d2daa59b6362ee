"""The Ledger hands out one object per table or concern, and they share its connection.

The objects (``ledger.units``, ``ledger.outbox``, ...) must write through the
one connection the Ledger holds, so that the session fence, put on once a
supervisor's session is open, guards every write whichever object makes it.
"""

from __future__ import annotations

import ast
import inspect
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import workunits._ledger
from tests.ledger.support import new_unit, start
from workunits._core.errors import SessionLost
from workunits._ledger import Ledger

FENCED = "s00000001"
TAKER = "s00000002"

# One write of each object, on a running unit ``u`` and a pending one ``p``.
WRITES: dict[str, Callable[[Ledger, str, str], object]] = {
    "units.submit": lambda led, u, p: new_unit(led),
    "units.save_output_offset": lambda led, u, p: led.units.save_output_offset(u, 10),
    "attempts.write": lambda led, u, p: led.attempts.write(u, attempt=1, progress=0.5),
    "attempts.write_progress_batch": lambda led, u, p: led.attempts.write_progress_batch(
        [(u, 1, 0.5, "half")]
    ),
    "attempts.save_checkpoint": lambda led, u, p: led.attempts.save_checkpoint(u, 1, {"n": 1}),
    "outbox.claim": lambda led, u, p: led.outbox.claim(None),
    "retains.add": lambda led, u, p: led.retains.add(u, 30.0),
    "requests.add": lambda led, u, p: led.requests.add("cancel", u),
    "signals.send": lambda led, u, p: led.signals.send(u, "go"),
    "schedules.advance": lambda led, u, p: led.schedules.advance("nightly", 1.0, 2.0),
    "sessions.advertise": lambda led, u, p: led.sessions.advertise(FENCED, "http://h:1"),
    "claims.claim": lambda led, u, p: led.claims.claim(FENCED, {}, 10),
    "retention.expire": lambda led, u, p: led.retention.expire(),
}


@pytest.mark.timeout(120)
def test_every_object_writes_behind_the_session_fence(ledger: Ledger) -> None:
    ledger.sessions.open(FENCED, os.getpid())
    ledger.fence(FENCED)
    running = start(ledger, new_unit(ledger).id, session=FENCED).id
    pending = new_unit(ledger).id
    with ledger.sibling() as other:
        other.sessions.open(TAKER, os.getpid())
        won, _ = other.sessions.take_over(TAKER, exclusive=True)
        assert won == [FENCED]
        written = []
        for name, write in WRITES.items():
            try:
                write(ledger, running, pending)
            except SessionLost:
                continue
            written.append(name)
        assert written == [], "written by a session taken over"
        # The refusal is the fence's: the same writes from the taker's ledger land.
        assert other.attempts.write(running, attempt=1, progress=0.5)
        assert other.requests.add("cancel", running) > 0


def test_no_ledger_class_is_a_god_object_and_no_module_a_drawer() -> None:
    """Issue 37: no class of the ledger over 50 methods, no module over 800 lines."""
    root = Path(inspect.getfile(workunits._ledger)).parent
    too_big = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 800:
            too_big.append(f"{path.relative_to(root)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
                if len(methods) > 50:
                    too_big.append(f"{path.relative_to(root)}: {node.name}, {len(methods)}")
    assert too_big == []
