"""``serve``: a supervisor daemon on the state dir, until SIGTERM, SIGINT or SIGHUP.

Deliberately thin: the ``Supervisor`` does the work (adopting pending rows,
applying requests, recovering units of dead sessions, concurrency limits);
this command owns only the process's signals, and says which one came to
``close()`` (SIGTERM: ``deploy=True``). The main thread blocks in ``select`` on a wakeup
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

from workunits._cli import user_code
from workunits._cli._app import cli, state_option
from workunits._errors import SpecError
from workunits._ledger._db import SYNC_MODES
from workunits.supervisor.facade import Supervisor

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@cli.command("serve")
@state_option
@click.option(
    "-c",
    "--concurrency",
    "limits",
    multiple=True,
    metavar="KIND=N",
    help="Run at most N units of KIND at once (default: agent=<number of cores>).",
)
@click.option(
    "--ledger-sync",
    type=click.Choice(sorted(SYNC_MODES)),
    default="full",
    show_default=True,
    help="normal: no fsync for submits and terminal writes (safe against any process "
    "crash, not a power cut; ~0.5 ms faster per unit here).",
)
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Import MODULE first (repeatable): code the units need, and custom kinds "
    "(a module's WORKUNITS_KINDS = {letter: WorkActor subclass}).",
)
@click.option(
    "--ledger",
    "ledger_url",
    metavar="URL",
    default=None,
    help="Keep the ledger in PostgreSQL (postgresql://...; the [postgres] extra) instead of "
    "SQLite in the state dir, which still holds output files, keys and the lock.",
)
def serve(
    state_dir: Path,
    limits: tuple[str, ...],
    ledger_sync: str,
    imports: tuple[str, ...],
    ledger_url: str | None,
) -> None:
    """Run a supervisor that executes the units submitted to the state dir.

    SIGTERM is a deploy: resumable units are stopped and left for the next
    `workunits serve` on this state dir to resume, pending ones wait for it,
    and the others end killed (reason shutdown). SIGINT (Ctrl-C) and SIGHUP
    end every running unit (reason shutdown).
    """
    concurrency = _limits(limits)
    kinds = user_code.import_all(imports)
    with _stop_signals() as wait_for_signal:
        supervisor = Supervisor(
            state_dir,
            install_signal_handlers=False,
            concurrency=concurrency,
            ledger_sync=ledger_sync,
            preload=imports,  # the zygote imports them too: every unit starts with them
            kinds=kinds,
            ledger=ledger_url,
        )
        deploy = False
        try:
            caps = ", ".join(f"{kind} {n}" for kind, n in sorted(concurrency.items()))
            unsynced = "; ledger not fsynced" if ledger_sync == "normal" else ""
            click.echo(
                f"workunits serve: supervising {state_dir} (pid {os.getpid()}, session "
                f"{supervisor.session}, at most {caps} at once{unsynced}); "
                "SIGTERM or Ctrl-C stops it",
                err=True,
            )
            signum = wait_for_signal()
            deploy = signum == signal.SIGTERM
            how = "leaving resumable work for the next run" if deploy else "ending running work"
            click.echo(f"workunits serve: {signal.Signals(signum).name}, {how}", err=True)
        finally:
            supervisor.close(deploy=deploy)


def _limits(items: tuple[str, ...]) -> dict[str, int]:
    limits = {"agent": os.cpu_count() or 1}
    for item in items:
        kind, sep, number = item.partition("=")
        try:
            value = int(number)
        except ValueError:
            value = 0
        if not sep or not kind or value < 1:
            raise SpecError(f"--concurrency takes KIND=N with N >= 1, got {item!r}")
        limits[kind] = value
    return limits


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
