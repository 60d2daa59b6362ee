"""Shell units (``b``): a command in its own session, output straight into a file.

stdout and stderr are the output file's descriptor itself, so output never
passes through the supervisor's memory.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workunits import _outputfile
from workunits._errors import SpecError
from workunits._process import ChildProcess
from workunits._record import Outcome
from workunits._status import Reason, Status
from workunits.actors.base import UnitBinding, WorkActor

DEFAULT_OUTPUT_CAP = 5 * 1024**3


@dataclass(frozen=True, slots=True)
class ShellSpec:
    argv: tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    output_cap: int = DEFAULT_OUTPUT_CAP

    @classmethod
    def build(
        cls,
        cmd: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        output_cap: int,
    ) -> ShellSpec:
        """Check the caller's arguments; every problem is a SpecError naming the argument."""
        if isinstance(cmd, str):
            if not cmd.strip():
                raise SpecError("cmd is an empty string; give a shell command or an argv list")
            argv: tuple[str, ...] = ("/bin/sh", "-c", cmd)
        elif isinstance(cmd, Sequence) and not isinstance(cmd, bytes | bytearray):
            if not cmd:
                raise SpecError("cmd is an empty argv list")
            if not all(isinstance(a, str) for a in cmd):
                raise SpecError(f"every argv item must be a str, got {list(cmd)!r}")
            argv = tuple(cmd)
        else:
            raise SpecError(f"cmd must be a str or a list of str, got {type(cmd).__name__}")
        if any("\0" in a for a in argv):
            raise SpecError("cmd contains a NUL character")
        if env is not None:
            if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in v
                for k, v in env.items()
            ):
                raise SpecError("env must map non-empty str names (without '=') to str values")
            env = dict(env)
        cwd_str = None if cwd is None else os.fspath(cwd)
        if cwd_str is not None and not os.path.isdir(cwd_str):
            raise SpecError(f"cwd {cwd_str!r} is not a directory")
        if isinstance(output_cap, bool) or not isinstance(output_cap, int) or output_cap <= 0:
            raise SpecError(f"output_cap must be a positive int of bytes, got {output_cap!r}")
        return cls(argv=argv, cwd=cwd_str, env=env, output_cap=output_cap)

    def describe(self) -> str:
        if self.argv[:2] == ("/bin/sh", "-c"):
            return self.argv[2]
        return shlex.join(self.argv)


class _Exited:
    """Reaper -> ShellActor: the process behind the pidfd has exited."""


class ShellActor(WorkActor):
    kind: ClassVar[str] = "shell"

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__(unit)
        self.spec: ShellSpec = unit.spec
        self._proc: ChildProcess | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, ShellSpec):
            raise SpecError(f"a shell unit needs a ShellSpec, got {type(spec).__name__}")

    def launch(self) -> None:
        fd = _outputfile.create(self.unit.output_path)
        try:
            try:
                # Popen forks through vfork/posix_spawn here (no preexec_fn), which
                # is safe in this threaded process; the zygote replaces it for agents.
                self._popen = subprocess.Popen(
                    self.spec.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=fd,
                    stderr=fd,
                    cwd=self.spec.cwd,
                    env=self.spec.env,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                self.finish(Outcome(Status.FAILED, error=_cannot_start(self.spec, exc)))
                return
        finally:
            os.close(fd)
        pid = self._popen.pid
        self._proc = ChildProcess(pid)
        # The kernel enforces the output cap: past it the command gets SIGXFSZ.
        cap = self.spec.output_cap
        # Already gone, or the cap is above our own hard limit: the tick check covers it.
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (cap, cap))
        self.unit.report_pid(self.unit.id, pid)
        self.unit.reaper.watch(self._proc.pidfd, lambda: self.actor_ref.tell(_Exited()))

    def signal_work(self, signum: int) -> None:
        if self._proc is not None:
            self._proc.signal_group(signum)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Exited):
            self._on_exit()
            return None
        return super().on_receive(message)

    def _on_exit(self) -> None:
        proc = self._proc
        assert proc is not None, "only a launched process can exit"
        status = proc.reap()
        assert status is not None, "the reaper reports only exited processes"
        proc.close()
        if self._popen is not None:
            self._popen.returncode = status.exit_code if status.signal is None else -status.signal
        if self._ending is None and (status.signal == signal.SIGXFSZ or self._reached_cap()):
            self._ending = Reason.OUTPUT_CAP
        self.finish(self.outcome_for_exit(status.exit_code, status.signal))

    def _reached_cap(self) -> bool:
        # A command that ignores SIGXFSZ gets EFBIG instead and exits as it likes;
        # the file stopping at the cap is what says the cap ended it.
        return _outputfile.size_of(self.unit.output_path) >= self.spec.output_cap

    def on_stop(self) -> None:
        # A unit stopped before its process exited (supervisor shutdown): the
        # process was already killed by then; release the descriptor.
        if self._proc is not None and self._proc.status is None:
            self._proc.signal_group(signal.SIGKILL)


def _cannot_start(spec: ShellSpec, exc: OSError) -> str:
    what = spec.argv[0]
    if isinstance(exc, FileNotFoundError):
        return f"could not start: command not found: {what!r}"
    if isinstance(exc, PermissionError):
        return f"could not start: permission denied: {what!r}"
    if isinstance(exc, NotADirectoryError | FileNotFoundError) and spec.cwd:
        return f"could not start {what!r} in {spec.cwd!r}: {exc.strerror}"
    return f"could not start {what!r}: {exc.strerror or exc}"
