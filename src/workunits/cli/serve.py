"""``serve``: a supervisor daemon on the state dir, until SIGTERM, SIGINT or SIGHUP.

Deliberately thin: the ``Supervisor`` does the work (adopting pending rows,
applying requests, recovering units of dead sessions); this command owns
only the process's signals. The main thread blocks in ``select`` on a wakeup
pipe, so a signal is seen at once; the handlers only record which signal
came, and the main thread then closes the supervisor, which ends or hands
over running work before the process exits 0.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import click

from workunits.cli._app import cli, state_option
from workunits.supervisor.facade import Supervisor

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@cli.command("serve")
@state_option
def serve(state_dir: Path) -> None:
    """Run a supervisor that executes the units submitted to the state dir.

    SIGTERM, SIGINT (Ctrl-C) and SIGHUP stop it: running units are ended or
    left to resume in the next run, as the supervisor's close() decides.
    """
    with _stop_signals() as wait_for_signal:
        supervisor = Supervisor(state_dir, install_signal_handlers=False)
        try:
            click.echo(
                f"workunits serve: supervising {state_dir} (pid {os.getpid()}); "
                f"SIGTERM or Ctrl-C stops it",
                err=True,
            )
            signum = wait_for_signal()
            click.echo(f"workunits serve: {signal.Signals(signum).name}, stopping", err=True)
        finally:
            supervisor.close()


@contextlib.contextmanager
def _stop_signals() -> Iterator[_Waiter]:
    """Handlers that record the stop signal, and a pipe that wakes the main thread."""
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    waiter = _Waiter(read_fd)
    previous_fd = signal.set_wakeup_fd(write_fd)
    previous = {signum: signal.signal(signum, waiter.on_signal) for signum in STOP_SIGNALS}
    try:
        yield waiter
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(read_fd)
        os.close(write_fd)


class _Waiter:
    """Runs in the main thread: the handler (between bytecodes) and the wait itself."""

    def __init__(self, read_fd: int) -> None:
        self._read_fd = read_fd
        self.received: int | None = None

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    def __call__(self) -> int:
        while self.received is None:
            select.select([self._read_fd], [], [])
            with contextlib.suppress(BlockingIOError):
                os.read(self._read_fd, 512)
        return self.received
