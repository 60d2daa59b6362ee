"""Supervisor processes of a cluster test: ``workunits serve`` on one shared ledger.

Specs in the ledger are signed with a state dir's key (``secret.key``), and a
supervisor refuses a spec it cannot verify; until the key comes from shared
configuration (``--secret-file``, another branch), every state dir of a
cluster test holds the same key: ``share_key`` copies one in before the start.

Reusable by the bigger cluster tests: ``Host.start(...)`` runs one serve
process with its own state dir, ``session`` is read from its banner, and
``kill``/``stop``/``cont`` send it real signals.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import eventually
from workunits._ledger.values import KEY_BYTES, KEY_FILE

_SESSION = re.compile(r"\(pid \d+, session (s[0-9a-z]{8})")  # the banner's, no other line's


def share_key(state: Path, key: bytes) -> None:
    """Give ``state`` (created, 0700) the cluster's signing key, before anything opens it."""
    state.mkdir(mode=0o700, exist_ok=True)
    path = state / KEY_FILE
    if not path.exists():
        path.write_bytes(key)
        path.chmod(0o400)


def cluster_key(tmp: Path) -> bytes:
    """One key for every state dir of a test (made once, in ``tmp``)."""
    path = tmp / "cluster.key"
    if not path.exists():
        path.write_bytes(secrets.token_bytes(KEY_BYTES))
    return path.read_bytes()


@dataclass
class Host:
    proc: subprocess.Popen[bytes]
    state: Path
    session: str
    log: Path

    @classmethod
    def start(
        cls,
        state: Path,
        url: str,
        *,
        lease: float = 2.0,
        limits: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> Host:
        share_key(state, cluster_key(state.parent))
        log = state.with_suffix(".log")
        seen = len(_SESSION.findall(log.read_text(errors="replace"))) if log.exists() else 0
        args = [sys.executable, "-m", "workunits._cli", "serve", "--state", str(state)]
        args += ["--ledger", url, "--session-lease", str(lease)]
        for item in limits:
            args += ["-c", item]
        with log.open("ab") as out:  # "a": a restart on the same state dir keeps the first log
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)

        def banner() -> str | None:
            found = _SESSION.findall(log.read_text(errors="replace"))
            if len(found) > seen:
                return str(found[-1])
            if proc.poll() is not None:
                raise AssertionError(f"serve exited: {log.read_text()}")
            return None

        try:  # 90 s: a start under the chaos test's load on 2 cores
            session = eventually(banner, 90, f"serve to start: {log}")
        except BaseException:
            proc.kill()
            raise
        return cls(proc, state, session, log)

    def signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def marked_env(marker: str) -> dict[str, str]:
    """The environment of a cluster test's processes: ``marker`` in it, and the
    worktree importable (units import ``tests.cluster.bodies`` by reference).

    Every process they start inherits it -- zygotes, units, and whatever a
    unit starts -- so ``survivors`` finds them however they escaped.
    """
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, WORKUNITS_CLUSTER_MARK=marker)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    return env


def survivors(marker: str, pids: set[int]) -> list[str]:
    """Live processes carrying ``marker`` in their environment, or whose pid,
    process group or session is one of ``pids`` (units call ``setsid``, so a
    unit's pid names its group and session): ``pid cmdline`` each."""
    needle = f"WORKUNITS_CLUSTER_MARK={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # gone meanwhile, or another user's
        fields = stat[stat.rfind(b")") + 2 :].split()
        state, pgid, sid = fields[0], int(fields[2]), int(fields[3])
        if state in (b"Z", b"X"):
            continue
        ours = needle in environ.split(b"\0")
        if ours or {int(entry.name), pgid, sid} & pids:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name} {command}")
    return found
