"""``watch``: a live full-screen table of running and recently ended units.

Everything runs in the main thread, in one loop: look at the ledger, redraw
only when what the screen would show changed, then wait for a key for one
interval (``select`` on the terminal, in cbreak mode so ``q`` arrives
without Enter). ``q`` or Ctrl-C quits; the terminal's modes and screen are
restored, and every unit the screen retained is released, on every way out.
Units are retained (leases renewed at each refresh) while on screen, so a
viewer never has a record evicted from under it; a killed viewer's leases
lapse with its process.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import threading
import time
import tty
from pathlib import Path
from typing import Any

import click
from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from workunits._cli import _render
from workunits._cli._app import cli, is_tty, opened, parse_duration, seconds_option, state_option
from workunits._client.ledger_client import Client
from workunits._core.errors import WorkunitsError
from workunits._core.retain import Retain
from workunits._core.status import Status, is_terminal
from workunits._ledger import UnitRow

CHROME_LINES = 4  # title, table header, caption, footer


@cli.command("watch")
@state_option
@click.option(
    "--recent",
    metavar="DURATION",
    default="5m",
    show_default=True,
    help="Also show units that ended within this long.",
)
@click.option(
    "--interval",
    type=float,
    callback=seconds_option(least=0.05),
    default=0.25,
    show_default=True,
    help="Seconds between looks at the ledger.",
)
@click.option("--once", is_flag=True, help="Print one frame and exit (no full screen).")
def watch(state_dir: Path, recent: str, interval: float, once: bool) -> None:
    """Watch units live: q or Ctrl-C quits."""
    window = parse_duration(recent)
    with opened(state_dir) as client:
        view = View(client, state_dir, window)
        console = Console()
        if once:
            console.print(view.frame(view.rows(), console.width))
            return
        # Ctrl-C is how one leaves a watch: not an error.
        with _Retainer(client) as retainer, _Keys() as keys, contextlib.suppress(KeyboardInterrupt):
            _loop(console, view, retainer, keys, interval)


def _loop(console: Console, view: View, retainer: _Retainer, keys: _Keys, interval: float) -> None:
    with Live(console=console, screen=True, auto_refresh=False, redirect_stderr=False) as live:
        shown: object = None
        while True:
            height = console.size.height
            rows = view.rows()[: max(1, height - CHROME_LINES)]
            retainer.hold([r.id for r in rows])
            now = time.time()
            key = view.fingerprint(rows, now, height, console.size.width)
            if key != shown:
                live.update(view.frame(rows, console.width, now), refresh=True)
                shown = key
            if keys.quit_within(interval):
                return


class View:
    """What the screen shows: active units oldest first, then ended ones newest first."""

    def __init__(self, client: Client, state_dir: Path, window: float) -> None:
        self._client = client
        self._state_dir = state_dir
        self._window = window
        self._total = 0

    def rows(self) -> list[UnitRow]:
        active = self._client.rows(status=Status.PENDING) + self._client.rows(status=Status.RUNNING)
        active.sort(key=lambda r: (r.created_at, r.id))
        ended = self._client.rows(ended_after=time.time() - self._window)
        ended = [r for r in ended if is_terminal(r.status)]
        ended.sort(key=lambda r: r.ended_at or 0.0, reverse=True)
        self._total = len(active) + len(ended)
        return active + ended

    def fingerprint(self, rows: list[UnitRow], now: float, height: int, width: int) -> object:
        """Everything the frame depends on: equal fingerprints draw equal frames."""
        cells = tuple(
            (
                r.id,
                r.shown_status,
                r.progress,
                r.progress_message,
                r.description,
                _render.age(now - r.created_at),
            )
            for r in rows
        )
        return (cells, self._total, self._client.supervisor_running(), height, width)

    def frame(self, rows: list[UnitRow], width: int, now: float | None = None) -> RenderableType:
        now = time.time() if now is None else now
        running = sum(1 for r in rows if r.status is Status.RUNNING)
        pending = sum(1 for r in rows if r.status is Status.PENDING)
        supervisor = "supervisor up" if self._client.supervisor_running() else "no supervisor"
        title = Text.assemble(
            ("workunits watch", "bold"), "  ", (supervisor, "dim"), f"  {self._state_dir}"
        )
        title.no_wrap, title.overflow = True, "ellipsis"
        hidden = self._total - len(rows)
        caption = f"+{hidden} more (the terminal is too short)" if hidden > 0 else None
        footer = Text(f"{running} running, {pending} pending   q or Ctrl-C quits", style="dim")
        if not rows:
            body: RenderableType = Text("no running or recently ended units", style="dim")
        else:
            body = _render.units_table(rows, now, width=width, caption=caption)
        return _render.stack(title, body, footer)


class _Retainer:
    """Holds a retain lease on every unit on screen, renewed at each refresh; releases
    what leaves the screen, and all at exit. If this process dies, they all lapse."""

    LEASE = 30.0  # seconds: far longer than a refresh, so one slow redraw loses nothing

    def __init__(self, client: Client) -> None:
        self._client = client
        self._held: dict[str, Retain] = {}

    def hold(self, ids: list[str]) -> None:
        wanted = set(ids)
        for work_id in ids:
            held = self._held.get(work_id)
            if held is not None and held.renew():
                continue
            with contextlib.suppress(WorkunitsError):  # a row gc removed meanwhile
                self._held[work_id] = self._client.retain(work_id, lease=self.LEASE)
        for work_id in set(self._held) - wanted:
            self._release(work_id)

    def _release(self, work_id: str) -> None:
        held = self._held.pop(work_id, None)
        if held is not None:
            with contextlib.suppress(WorkunitsError):  # the ledger went away
                held.release()

    def __enter__(self) -> _Retainer:
        return self

    def __exit__(self, *exc: object) -> None:
        for work_id in list(self._held):
            self._release(work_id)


class _Keys:
    """Key presses from the terminal, without Enter and without echo (cbreak mode).

    Without a terminal on stdin, only Ctrl-C quits and waits are plain timed waits.
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        self._saved: list[Any] | None = None
        self._idle = threading.Event()  # never set: a timed wait without a terminal

    def __enter__(self) -> _Keys:
        if is_tty(sys.stdin):
            self._fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None and self._saved is not None:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def quit_within(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a key; True when it asks to quit."""
        if self._fd is None:
            self._idle.wait(timeout)
            return False
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if not ready:
                return False
            keys = os.read(self._fd, 64)
            if not keys or b"q" in keys.lower():
                return True  # q, or the terminal went away
        return False
