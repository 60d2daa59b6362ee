"""Real processes for the end-to-end CLI tests: a ``workunits serve`` and terminals.

``Serve`` runs the daemon in its own session and ends it in a finalizer:
SIGTERM first (the way it is meant to stop), SIGKILL of its group only if it
does not exit in time. ``Terminal`` runs a command in a pseudo-terminal
(pexpect) and keeps what its screen shows in a terminal emulator (pyte), so
tests assert on the screen a person would see. Every wait is a timed wait on
a condition.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte

REPO = Path(__file__).resolve().parents[2]
WAIT = 20.0


def cli_env() -> dict[str, str]:
    """The environment for a ``workunits`` subprocess: tests importable, a sane terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["TERM"] = "xterm-256color"
    env.pop("WORKUNITS_STATE", None)
    return env


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "workunits._cli", *args]


class Serve:
    """``workunits serve --state DIR`` in its own session, until ``stop()``."""

    def __init__(self, state_dir: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            cli_argv("serve", "--state", str(state_dir), *args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=cli_env(),
            cwd=REPO,
            start_new_session=True,
        )
        self.banner = self._read_line(WAIT)

    def _read_line(self, timeout: float) -> str:
        assert self.proc.stderr is not None
        ready, _, _ = select.select([self.proc.stderr], [], [], timeout)
        if not ready:
            self.stop()
            raise AssertionError(f"workunits serve said nothing within {timeout} s")
        return self.proc.stderr.readline().decode()

    def read_line(self) -> str:
        """The next line it writes to stderr (within WAIT seconds)."""
        return self._read_line(WAIT)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Signal it and return its exit code; SIGKILL its group if it does not exit.

        Safe to call again: a stopped serve just reports its exit code.
        """
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(WAIT)
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.proc.stderr.close()
        return self.proc.returncode


class Terminal:
    """A command in a ``rows`` x ``cols`` pseudo-terminal, and its screen."""

    def __init__(self, *args: str, rows: int = 24, cols: int = 80) -> None:
        self.screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self.screen)
        argv = cli_argv(*args)
        self.child: pexpect.spawn[bytes] = pexpect.spawn(
            argv[0], argv[1:], env=cli_env(), cwd=str(REPO), dimensions=(rows, cols)
        )
        self.exitstatus: int | None = None

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, check: Callable[[str], bool] | str, timeout: float = WAIT) -> str:
        """Read the terminal until the screen satisfies ``check`` (or contains it)."""
        test = (lambda screen: check in screen) if isinstance(check, str) else check
        deadline = time.monotonic() + timeout
        while not test(self.text()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"the screen never showed {check!r}:\n{self.text()}")
            try:
                self._stream.feed(self.child.read_nonblocking(65536, timeout=remaining))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                if not test(self.text()):
                    raise AssertionError(
                        f"the program ended before the screen showed {check!r}:\n{self.text()}"
                    ) from None
        return self.text()

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def interrupt(self) -> None:
        self.child.sendintr()

    def wait_exit(self, timeout: float = WAIT) -> int:
        """Drain the screen until the program exits; its exit code (128+n for signal n)."""
        deadline = time.monotonic() + timeout
        while self.child.isalive():
            if time.monotonic() > deadline:
                raise AssertionError(f"the program did not exit within {timeout} s")
            try:
                self._stream.feed(self.child.read_nonblocking(65536, timeout=0.2))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                break
        self.child.wait()
        status = self.child.exitstatus
        return 128 + (self.child.signalstatus or 0) if status is None else status

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.close()


def release(fifo: Path, word: str, timeout: float = WAIT) -> None:
    """Write ``word`` into ``fifo`` once a unit has it open for reading."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody reads it yet
            if time.monotonic() > deadline:
                raise AssertionError(f"no unit opened {fifo} within {timeout} s") from None
            select.select([], [], [], delay)  # a bounded pause between tries
            delay = min(delay * 2, 0.1)
            continue
        try:
            os.write(fd, f"{word}\n".encode())
        finally:
            os.close(fd)
        return
