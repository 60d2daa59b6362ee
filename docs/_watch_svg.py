"""Render a ``workunits watch`` frame of a real short run to docs/watch.svg.

    PYTHONPATH=src python docs/_watch_svg.py

A supervisor runs a few units (a finished shell, a failed one, an agent that
reports progress, a sleeping shell); while they run, the frame ``watch`` would
draw is printed to a recording rich Console and saved as SVG (rich's
``save_svg``). The SVG is committed; the Get started page shows it.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console

import workunits as wu
from workunits._cli.watch import View

SVG = Path(__file__).resolve().parent / "watch.svg"


def crawl(pages: int) -> int:
    """An agent that reports progress as it goes (and waits to be drawn mid-way)."""
    ctx = wu.current()
    for page in range(1, pages + 1):
        ctx.progress(page / pages, f"page {page}/{pages}")
        if page == pages // 2:
            time.sleep(30)  # the frame is taken now; the supervisor's close ends it
    return pages


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the frame's title shows the state dir: a relative one
        state = Path(".workunits")
        with wu.Supervisor(state, install_signal_handlers=False, shutdown_grace=1) as sup:
            sup.shell("echo built", description="make build").wait(timeout=30)
            sup.shell("exit 3", description="flaky check").wait(timeout=30)
            agent = sup.agent(crawl, 40, description="crawl docs")
            sup.shell("sleep 30", description="sleep 30")
            deadline = time.monotonic() + 30
            while (agent.get().progress or 0) < 0.5:  # bounded: until it is mid-way
                assert time.monotonic() < deadline, "the agent never reported progress"
                threading.Event().wait(0.05)
            with wu.connect(state, create=False) as client:
                view = View(client, state, 3600)
                console = Console(record=True, width=100, force_terminal=True, file=io.StringIO())
                console.print(view.frame(view.rows(), console.width))
            console.save_svg(str(SVG), title="workunits watch")
            for unit in sup.list(status="running"):
                sup.kill(unit.id)
    print(f"wrote {SVG}")


if __name__ == "__main__":
    main()
