"""Shell units (``b``): a command in its own session, output straight into a file.

The zygote forks and execs the command in its own session; stdout and stderr
are the output file's descriptor itself, so output never passes through the
supervisor's memory.
"""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workunits import _outputfile
from workunits._errors import SpecError
from workunits._record import Outcome
from workunits._status import Reason, Status
from workunits._zygote.protocol import Limits, SpawnExec
from workunits.actors.base import UnitBinding, WorkActor
from workunits.actors.process_events import (
    ProcessExited,
    ProcessLost,
    ProcessSpawned,
    ProcessSpawnFailed,
    TellActor,
)

DEFAULT_OUTPUT_CAP = 5 * 1024**3


def check_bytes(name: str, value: object) -> None:
    """SpecError unless ``value`` is a positive int: a size in bytes (a cap, a limit)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{name} must be a positive int of bytes, got {value!r}")


@dataclass(frozen=True, slots=True)
class ShellSpec:
    argv: tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    output_cap: int = DEFAULT_OUTPUT_CAP
    on_lost: str = "fail"  # or "restart": run again when its supervisor died mid-run

    @classmethod
    def build(
        cls,
        cmd: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        output_cap: int,
        on_lost: str = "fail",
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
        check_bytes("output_cap", output_cap)
        if on_lost not in ("fail", "restart"):
            raise SpecError(f"on_lost must be 'fail' or 'restart', got {on_lost!r}")
        return cls(argv=argv, cwd=cwd_str, env=env, output_cap=output_cap, on_lost=on_lost)

    def describe(self) -> str:
        if self.argv[:2] == ("/bin/sh", "-c"):
            return self.argv[2]
        return shlex.join(self.argv)


class ShellActor(WorkActor):
    kind: ClassVar[str] = "shell"

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__(unit)
        self.spec: ShellSpec = unit.spec

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, ShellSpec):
            raise SpecError(f"a shell unit needs a ShellSpec, got {type(spec).__name__}")

    @classmethod
    def to_durable(cls, spec: ShellSpec, timeout: float | None) -> Any:
        return {
            "argv": list(spec.argv),
            "cwd": spec.cwd,
            "env": None if spec.env is None else dict(spec.env),
            "output_cap": spec.output_cap,
            "on_lost": spec.on_lost,
            "timeout": timeout,
        }

    @classmethod
    def from_durable(cls, stored: Any) -> tuple[ShellSpec, float | None]:
        if not isinstance(stored, dict) or not isinstance(stored.get("argv"), list):
            raise SpecError(f"a stored shell spec is a dict with an argv list, got {stored!r:.80}")
        spec = ShellSpec(
            argv=tuple(stored["argv"]),
            cwd=stored.get("cwd"),
            env=stored.get("env"),
            output_cap=int(stored.get("output_cap", DEFAULT_OUTPUT_CAP)),
            on_lost=str(stored.get("on_lost", "fail")),
        )
        return spec, stored.get("timeout")

    @classmethod
    def resumable(cls, stored: Any, spec_format: str) -> bool:
        return isinstance(stored, dict) and stored.get("on_lost") == "restart"

    def launch(self) -> None:
        # A restarted attempt starts a fresh output file (the old one went with its
        # session). A first attempt removes nothing: whatever is already at its path
        # (a planted symlink) is refused by create(), not silently replaced.
        if self.unit.attempt > 1:
            _outputfile.remove(self.unit.output_path)
        fd = _outputfile.create(self.unit.output_path)
        try:
            # The zygote forks and execs; the kernel enforces the output cap
            # (RLIMIT_FSIZE: past it the command gets SIGXFSZ).
            request = SpawnExec(
                unit_id=self.unit.id,
                argv=self.spec.argv,
                cwd=self.spec.cwd,
                env=self.spec.env,
                limits=Limits(output_cap=self.spec.output_cap),
            )
            self.unit.zygote.spawn_exec(request, fd, TellActor(self.actor_ref))
        finally:
            os.close(fd)

    def signal_work(self, signum: int) -> None:
        self.unit.zygote.signal(self.unit.id, signum)

    def on_receive(self, message: Any) -> Any:
        match message:
            case ProcessSpawned(pid, pidfd):
                self.adopt_process(pid, pidfd)
            case ProcessSpawnFailed(error):
                self.finish(Outcome(Status.FAILED, error=error))
            case ProcessExited(exit_code, signum):
                if self._ending is None and (signum == signal.SIGXFSZ or self._reached_cap()):
                    self._ending = Reason.OUTPUT_CAP
                self.finish(self.outcome_for_exit(exit_code, signum))
            case ProcessLost():
                self.kill_orphaned_group()
                error = "lost: the zygote process that forked this unit died"
                self.finish(Outcome(Status.FAILED, reason=Reason.LOST, error=error))
            case _:
                return super().on_receive(message)
        return None

    def _reached_cap(self) -> bool:
        # A command that ignores SIGXFSZ gets EFBIG instead and exits as it likes;
        # the file stopping at the cap is what says the cap ended it.
        return _outputfile.size_of(self.unit.output_path) >= self.spec.output_cap
