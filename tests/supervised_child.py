"""A program that supervises one shell unit, for the shutdown tests (run as a subprocess).

Usage: ``python supervised_child.py STATE_DIR MODE``. It prints the unit's pid on
its first line once the unit runs, then, by MODE:

- ``pause``: waits for signals forever (the test sends SIGTERM/SIGINT/SIGHUP);
- ``exit``: returns normally without closing the supervisor (atexit must clean up);
- ``raise``: dies of an uncaught exception without closing it;
- ``quiet-first``: like ``pause``, after a first supervisor that asked for no
  signal handlers came and went;
- ``ignore-hup``: SIGHUP is ignored before the supervisor starts; after the test
  writes a line to stdin, prints the unit's status and exits;
- ``inherited-ignores``: as ``ignore-hup``, but the program keeps the dispositions
  its parent gave it (``nohup``, or a background job of a non-interactive shell);
- ``drop``: a supervisor without a ticker is dropped unclosed and garbage
  collected, then the program exits normally;
- ``signal-in-lock``: the program has its own SIGTERM handler, and waits for it
  while holding a lock the supervisor's close needs (its waiters' lock); once
  its handler has run it lets go, closes and prints the unit's status;
- ``close-in-thread``: a daemon thread closes the supervisor, and the program
  returns as soon as that close has begun (atexit must let it finish).
"""

from __future__ import annotations

import gc
import select
import signal
import socket
import sys
import threading
from pathlib import Path

from workunits import Supervisor


def main() -> None:
    state_dir, mode = Path(sys.argv[1]), sys.argv[2]
    if mode != "inherited-ignores":
        # Behave like a program started from a terminal, whatever our parent ignored
        # (a background job, for one, starts with SIGINT ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if mode == "quiet-first":
        Supervisor(state_dir / "quiet", install_signal_handlers=False).close()
    if mode == "ignore-hup":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if mode == "drop":
        start_and_drop(state_dir)
        gc.collect()
        return
    terminated = threading.Event()
    if mode == "signal-in-lock":
        signal.signal(signal.SIGTERM, lambda signum, frame: terminated.set())
    sup = Supervisor(state_dir / "main")
    unit = start_unit(sup)
    if mode == "exit":
        return
    if mode == "close-in-thread":
        threading.Thread(target=sup.close, daemon=True).start()
        while not sup._closed:  # begun: atexit finds a close under way
            threading.Event().wait(0.001)
        return
    if mode == "raise":
        raise RuntimeError("the program crashed; its supervisor must still clean up")
    if mode == "signal-in-lock":
        with sup._waiters._lock:  # what a thread may hold when a signal lands
            wait_for_signals(until=terminated)
        sup.close()  # the cleanup thread's close is under way: this waits for it
        print("closed", flush=True)
        return
    if mode in ("ignore-hup", "inherited-ignores"):
        sys.stdin.readline()
        print(sup.get(unit).status.value, flush=True)
        sup.close()
        return
    wait_for_signals()


def start_unit(sup: Supervisor) -> str:
    """Start the unit and print its pid once it runs (it has written its first line)."""
    unit = sup.shell("echo $$; exec sleep 30")
    first_line = next(sup.stream(unit.id))
    print(int(first_line.split(b"\n", 1)[0]), flush=True)
    return unit.id


def start_and_drop(state_dir: Path) -> None:
    start_unit(Supervisor(state_dir / "dropped", tick_interval=None))


def wait_for_signals(until: threading.Event | None = None) -> None:
    """Block until a signal arrives, then let Python run its handler; forever, or ``until``.

    Not ``signal.pause()``: the kernel may deliver a process signal to any of the
    supervisor's threads, which would leave the main thread paused with the
    handler pending. The wakeup descriptor is written whichever thread got it.
    """
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    while until is None or not until.is_set():
        select.select([wake_r], [], [])
        wake_r.recv(64)  # the handler runs right after this, in this thread


if __name__ == "__main__":
    main()
