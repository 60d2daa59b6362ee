"""A real PostgreSQL server for the tests, started by the tests in a temporary directory.

Debian's ``postgresql`` package keeps its binaries under its versioned lib
directory (``/usr/lib/postgresql/<major>/bin``), not on PATH; the newest found
there is used. ``initdb`` refuses to run as root, and the tests (and CI) run as
root: then the server runs as the unprivileged ``postgres`` user the package
creates, through ``setpriv``, which also gives it a parent-death signal so a
test run killed outright does not leave it behind. Run as another user, the
server runs as that user.

The server listens on a Unix socket in its own directory only (no TCP port, so
parallel test runs never collide) and trusts local connections. Each test
gets a database of its own (``database()``), dropped afterwards.

``fsync=off`` by default: the tests check behaviour, and the disk is shared.
``durable=True`` keeps PostgreSQL's defaults, for benchmarks.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SUPERUSER = "workunits"
START_TIMEOUT = 60.0


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that has ``initdb`` and ``postgres``."""
    found = [
        Path(initdb).parent
        for initdb in glob.glob("/usr/lib/postgresql/*/bin/initdb")
        if Path(initdb).with_name("postgres").exists()
    ]

    def major(path: Path) -> int:
        name = path.parent.name
        return int(name) if name.isdigit() else 0

    return max(found, key=major) if found else None


def why_not_available() -> str | None:
    """None when a server can be started here; otherwise the reason, for a skip."""
    try:
        import psycopg  # noqa: F401, PLC0415 - the optional [postgres] extra
    except ImportError:
        return "psycopg is not installed: pip install 'workunits[postgres]' (make test does)"
    if find_bin_dir() is None:
        return (
            "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: install Debian's "
            "postgresql package (make test does when run as root)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no 'postgres' user to run the server as"
        if shutil.which("setpriv") is None:
            return "running as root, and setpriv (util-linux) is missing to drop to 'postgres'"
    return None


class PostgresServer:
    """One ``postgres`` process on a Unix socket in a temporary directory; use it in ``with``."""

    def __init__(self, *, durable: bool = False) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries found; see why_not_available()")
        self._bin = bin_dir
        self._durable = durable
        self._root = Path(tempfile.mkdtemp(prefix="workunits-pg-"))
        self._data = self._root / "data"
        self.socket_dir = self._root / "sock"
        self._proc: subprocess.Popen[bytes] | None = None
        self._as_root = os.geteuid() == 0

    def __enter__(self) -> PostgresServer:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.socket_dir}"

    def _argv(self, *argv: str) -> list[str]:
        if not self._as_root:
            return list(argv)
        return [
            "setpriv",
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--pdeathsig=SIGQUIT",
            *argv,
        ]

    def _start(self) -> None:
        self.socket_dir.mkdir()
        if self._as_root:
            entry = pwd.getpwnam("postgres")
            for path in (self._root, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            self._argv(
                str(self._bin / "initdb"),
                "--pgdata",
                str(self._data),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self._root,
        )
        settings = [
            "listen_addresses=",
            f"unix_socket_directories={self.socket_dir}",
            "max_connections=200",
        ]
        if not self._durable:
            settings += ["fsync=off", "full_page_writes=off", "synchronous_commit=off"]
        argv = [str(self._bin / "postgres"), "-D", str(self._data)]
        for setting in settings:
            argv += ["-c", setting]
        with open(self._root / "server.log", "wb") as log:
            self._proc = subprocess.Popen(
                self._argv(*argv),
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=self._root,
                start_new_session=True,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg  # noqa: PLC0415 - the optional [postgres] extra

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"postgres exited at start:\n{self.log()}")
            try:
                psycopg.connect(self.url(), connect_timeout=5).close()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"postgres was not ready after {START_TIMEOUT} s:\n{self.log()}"
                    ) from None
                time.sleep(0.05)  # polling with a deadline: nothing tells us it is ready
            else:
                return

    def log(self) -> str:
        try:
            return (self._root / "server.log").read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT: sessions are ended, nothing is waited for), then remove it all."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self._root, ignore_errors=True)

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A fresh, empty database; its URL. Dropped afterwards, with anyone still connected."""
        import psycopg  # noqa: PLC0415 - the optional [postgres] extra

        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield self.url(name)
        finally:
            with psycopg.connect(self.url(), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
