"""The floor of a confined start: what the default protection costs a process at least.

Issue 41's per-unit floors include the default protection: a unit's process
joins the units' namespace (the state dir hidden), drops what it may not keep
and restricts itself with Landlock before its code or command runs. No
``posix_spawn`` can do that; some process must fork, run the confinement in
the child and exec. The cheapest such process is a small, single-threaded
Python that does nothing else, as the zygote is, so that is the floor here:

- ``ConfinedStarter``: a helper process (this file, run as a script) that
  builds the same namespace and default ruleset as a supervisor's zygote
  (``UnitIsolation.start``) and keeps one child forked and confined ahead
  with the default protection's plan (``UnitIsolation.confine``); per
  request that child execs ``true``, the helper reaps it, answers, and
  confines the next. ``run_true()`` is one request, round trip included: a
  supervisor asks its zygote over a socket too.

What the machine could not enforce (``missing``) is left out of the floor, as
a supervisor leaves it out of its units' confinement.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import TracebackType

from workunits._core.sandbox import Sandbox
from workunits._sandbox.plan import Confinement
from workunits._sandbox.unit import Settings, UnitIsolation

CONFINED_TRUE = "`true` exec'd by a process confined ahead (the default protection)"


class ConfinedStarter:
    """A helper process that starts ``true`` under the default protection, one at a time."""

    def __init__(self, hidden: str) -> None:
        """``hidden``: the directory the units' namespace hides (a state dir)."""
        self._proc = subprocess.Popen(
            [sys.executable, __file__, hidden],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        first = self._proc.stdout.readline().decode().rstrip("\n")
        self.missing = [m for m in first.split("\t") if m]  # what this machine cannot enforce

    def run_true(self) -> int:
        """Fork, confine, exec ``true``, reap: its exit code (0)."""
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(b"\n")
        self._proc.stdin.flush()
        return int(self._proc.stdout.readline())

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> ConfinedStarter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _serve(hidden: str) -> None:
    """The helper: one line in, one confined ``true`` run and reaped, one line out.

    Each ``true`` runs in a process forked and confined ahead, after the previous
    answer (as a supervisor's confined spares are): a request pays the exec and
    the reap, not the confinement, which takes a fresh fork milliseconds here.
    """
    isolation = UnitIsolation.start(Settings("default", hide=(hidden,)), None, None)
    plan = Confinement.of(Sandbox(), tmpdir=None)
    out = sys.stdout.buffer
    out.write("\t".join(isolation.missing).encode() + b"\n")
    out.flush()
    spare = _spare(isolation, plan)
    for _ in sys.stdin.buffer:
        pid, go = spare
        os.write(go, b"x")
        os.close(go)
        _, status = os.waitpid(pid, 0)
        out.write(b"%d\n" % os.waitstatus_to_exitcode(status))
        out.flush()
        spare = _spare(isolation, plan)
    isolation.close()


def _spare(isolation: UnitIsolation, plan: Confinement) -> tuple[int, int]:
    """A child confined now, that execs ``true`` once a byte comes on the pipe."""
    wait, go = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go)
            isolation.confine(plan)
            os.read(wait, 1)
            os.execv("/bin/true", ["true"])  # noqa: S606 - the floor's command, as a unit runs it
        finally:
            os._exit(127)
    os.close(wait)
    return pid, go


if __name__ == "__main__":
    _serve(sys.argv[1])
