"""A real ``workunits serve --http`` process on loopback, for the HTTP tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0  # a loaded 2-core machine starts a server slowly


class Served:
    """``workunits serve --http 127.0.0.1:0`` on ``state_dir``; ``url`` and ``token`` once up."""

    def __init__(self, state_dir: Path, *extra: str, bind: str = "127.0.0.1:0") -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]
        )
        self.state_dir = state_dir
        self.log = state_dir.parent / f"{state_dir.name}-serve.log"
        self._log = self.log.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workunits._cli",
                "serve",
                "--state",
                str(state_dir),
                "--http",
                bind,
                *extra,
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            match = re.search(r"HTTP API at (\S+)", self.log.read_text())
            if match:
                self.url = match[1]
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"serve --http did not start:\n{self.log.read_text()}")
            time.sleep(0.02)  # polling a log file with a deadline, not a sleep-then-assert
        # With --secret-file the token is the shared secret's, and no http.token is made.
        token_file = state_dir / "http.token"
        self.token = token_file.read_text().strip() if token_file.exists() else ""
        self.auth = {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
