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
from typing import TYPE_CHECKING

import click

from workunits._cli import ledger_log, user_code
from workunits._cli._app import cli, parse_duration, seconds_option, state_option, tls_options
from workunits._core.errors import SpecError
from workunits._core.ids import BUILTIN_KINDS
from workunits._ledger import secretfile
from workunits._ledger.sessions import DEFAULT_LEASE, MIN_LEASE
from workunits._ledger.sqlite.db import SYNC_MODES
from workunits._ledger.store import DEFAULT_EXPIRE_AFTER
from workunits.supervisor.facade import Supervisor

if TYPE_CHECKING:
    from workunits._http.server import HttpServer

# The exit code when another supervisor took this one's session over: a process
# manager restarts it (EX_TEMPFAIL), with a fresh session.
EXIT_SESSION_LOST = 75
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
    "--drain-timeout",
    type=float,
    callback=seconds_option(),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="On SIGTERM, first stop admitting work and give the running units that cannot "
    "resume up to SECONDS to finish; then stop as a deploy. A second signal cuts it short.",
)
@click.option(
    "--http",
    "http_bind",
    metavar="HOST:PORT",
    default=None,
    help="Also serve the HTTP API and web view (needs workunits[http]); "
    "a bare PORT binds 127.0.0.1, port 0 picks a free one.",
)
@tls_options
@click.option(
    "--ledger",
    "ledger_url",
    metavar="URL",
    default=None,
    help="Keep the ledger in PostgreSQL (postgresql://...; the [postgres] extra) instead of "
    "SQLite in the state dir, which still holds output files, keys and the lock.",
)
@click.option(
    "--session-lease",
    type=float,
    callback=seconds_option(least=MIN_LEASE),
    default=DEFAULT_LEASE,
    show_default=True,
    metavar="SECONDS",
    help="With a shared --ledger: after SECONDS without this supervisor's heartbeat, "
    "another one takes over its units. If that happens while this one still runs "
    f"(it was stopped), it kills its units' processes and exits {EXIT_SESSION_LOST}.",
)
@click.option(
    "--advertise",
    metavar="URL",
    default=None,
    help="The http(s):// URL other hosts reach this --http API at, kept in the ledger's "
    "session row so their clients read live output through it (default: the --http address).",
)
@click.option(
    "--secret-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar="WORKUNITS_SECRET_FILE",
    help="A file (mode 600) holding the secret every host of a shared ledger is given: it "
    "signs stored specs and is the HTTP token, in place of the state dir's own "
    "[env: WORKUNITS_SECRET_FILE].",
)
@click.option(
    "--http-limits",
    metavar="HEADER,BODY,CONNECTIONS",
    default=None,
    hidden=True,  # for tests: a slow client is cut in seconds, not tens of them
    help="Seconds a request's headers and body may take, and connections per client.",
)
@click.option(
    "--expire-after",
    "expire_after_text",
    metavar="DURATION",
    default=f"{DEFAULT_EXPIRE_AFTER / 86400:g}d",
    show_default=True,
    help="How long an ended unit keeps its result, tail and checkpoint (90s, 15m, 12h, 7d); "
    "then it reads expired (HTTP 410), and gc forgets it later.",
)
@click.option(
    "--isolation",
    type=click.Choice(["default", "required", "off"]),
    default="default",
    show_default=True,
    help="How units are confined: the strongest protection this machine gives (default), "
    "all of it or refuse to start (required), or none (off). `workunits doctor` says what "
    "this machine gives.",
)
def serve(  # noqa: PLR0917 - click passes every option by position
    state_dir: Path,
    limits: tuple[str, ...],
    ledger_sync: str,
    imports: tuple[str, ...],
    drain_timeout: float,
    http_bind: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    insecure: bool,
    ledger_url: str | None,
    session_lease: float,
    advertise: str | None,
    secret_file: Path | None,
    http_limits: str | None,
    expire_after_text: str,
    isolation: str,
) -> None:
    """Run a supervisor that executes the units submitted to the state dir.

    SIGTERM is a deploy: resumable units are stopped and left for the next
    `workunits serve` on this state dir to resume, pending ones wait for it,
    and the others end killed (reason shutdown) -- after up to --drain-timeout
    seconds in which they may finish and nothing new starts. SIGINT (Ctrl-C)
    and SIGHUP end every running unit (reason shutdown).
    """
    concurrency = _limits(limits)
    expire_after = parse_duration(expire_after_text)
    if advertise is not None and http_bind is None:
        raise SpecError("--advertise names where the --http API is reached: give --http too")
    secret = secretfile.resolve(secret_file)
    kinds = user_code.import_all(imports)
    ledger_log.install()  # a ledger that is away: one line per failure, not a screenful
    with _stop_signals() as wait_for_signal:
        supervisor = Supervisor(
            state_dir,
            install_signal_handlers=False,
            concurrency=concurrency,
            ledger_sync=ledger_sync,
            preload=imports,  # the zygote imports them too: every unit starts with them
            kinds=kinds,
            ledger=ledger_url,
            session_lease=session_lease,
            on_session_lost=wait_for_signal.session_lost,
            secret_file=secret_file,
            expire_after=expire_after,
            isolation=isolation,
        )
        deploy = False
        http = None
        try:
            if http_bind is not None:
                token = None if secret is None else secret.token
                http = _start_http(
                    supervisor,
                    http_bind,
                    tls_cert,
                    tls_key,
                    insecure,
                    token,
                    advertise,
                    http_limits,
                )
                supervisor.advertise(advertise or http.url)
            caps = ", ".join(f"{kind} {n}" for kind, n in sorted(concurrency.items()))
            unsynced = "; ledger not fsynced" if ledger_sync == "normal" else ""
            click.echo(
                f"workunits serve: supervising {state_dir} (pid {os.getpid()}, session "
                f"{supervisor.session}, at most {caps} at once{unsynced}); "
                "SIGTERM or Ctrl-C stops it",
                err=True,
            )
            signum = wait_for_signal()
            if wait_for_signal.lost:
                click.echo(
                    "workunits serve: this supervisor's session was taken over by another "
                    "(its lease lapsed); its units' processes were killed, exiting",
                    err=True,
                )
                raise SystemExit(EXIT_SESSION_LOST)
            deploy = signum == signal.SIGTERM
            if deploy and drain_timeout > 0:
                _drain(supervisor, drain_timeout, wait_for_signal)
            how = "leaving resumable work for the next run" if deploy else "ending running work"
            click.echo(f"workunits serve: {signal.Signals(signum).name}, {how}", err=True)
        finally:
            if http is not None:
                http.stop()
            supervisor.close(deploy=deploy)


def _drain(supervisor: Supervisor, timeout: float, signals: _Waiter) -> None:
    click.echo(
        f"workunits serve: SIGTERM, admitting no more work; draining for up to {timeout:g} s",
        err=True,
    )
    signals.interrupt_on_next = True
    try:
        # A second signal that came while we said so cuts the drain short too.
        still = None if signals.second else supervisor.drain(timeout)
    except _SecondSignal:
        still = None
    finally:
        signals.interrupt_on_next = False
    if still is None:
        click.echo("workunits serve: a second signal, stopping now", err=True)
        return
    if still:
        click.echo(f"workunits serve: still running after the drain: {' '.join(still)}", err=True)


def _start_http(  # noqa: PLR0917 - serve's own options, passed on
    sup: Supervisor,
    bind: str,
    tls_cert: str | None,
    tls_key: str | None,
    insecure: bool,
    token: str | None,
    advertise: str | None,
    limits_text: str | None = None,
) -> HttpServer:
    try:
        from workunits._http.protocol import Limits  # noqa: PLC0415 - optional extra
        from workunits._http.server import HttpServer, parse_bind  # noqa: PLC0415 - optional extra
    except ImportError as exc:
        raise SpecError(
            f"--http needs the http extra: pip install 'workunits[http]' ({exc})"
        ) from None
    host, port = parse_bind(bind)
    server = HttpServer(
        sup,
        host,
        port,
        tls_cert=tls_cert,
        tls_key=tls_key,
        insecure=insecure,
        token=token,
        advertise=advertise,
        limits=None if limits_text is None else Limits.parse(limits_text),
    )
    url = server.start()
    if server.warning is not None:
        click.echo(f"workunits serve: warning: {server.warning}", err=True)
    click.echo(f"workunits serve: HTTP API at {url} (workunits ui opens the web view)", err=True)
    return server


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
        # A letter replaces the default set by name (a=2 overrides agent's), not beside it.
        limits[BUILTIN_KINDS.get(kind, kind)] = value
    return limits


@contextlib.contextmanager
def _stop_signals() -> Iterator[_Waiter]:
    """Handlers that record the stop signal, and a pipe that wakes the main thread."""
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    waiter = _Waiter(read_fd, write_fd)
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


class _SecondSignal(Exception):
    """Raised by the handler, in the main thread, at a signal during the drain."""


class _Waiter:
    """Runs in the main thread: the handler (between bytecodes) and the wait itself."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read_fd = read_fd
        self._write_fd = write_fd
        self.lost = False  # the supervisor's session was taken over (session_lost)
        self.received: int | None = None
        # Set while the main thread drains: a further signal raises _SecondSignal
        # there, which ends the drain's wait (an interruptible Event wait).
        self.interrupt_on_next = False
        # A further signal came before the drain began: the drain is cut short at once.
        self.second = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            return
        self.second = True
        if self.interrupt_on_next:
            self.interrupt_on_next = False
            raise _SecondSignal

    def session_lost(self) -> None:
        """In the supervisor's actor thread: wake the main thread to exit."""
        self.lost = True
        if self.received is None:
            self.received = signal.SIGINT  # nothing is left to leave for a next run
        with contextlib.suppress(BlockingIOError):
            os.write(self._write_fd, b"L")

    def __call__(self) -> int:
        while self.received is None:
            select.select([self._read_fd], [], [])
            with contextlib.suppress(BlockingIOError):
                os.read(self._read_fd, 512)
        return self.received
