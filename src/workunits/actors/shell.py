"""Shell units (``b``): a command in its own session, output straight into a file.

The zygote forks and execs the command in its own session; stdout and stderr
are the output file's descriptor itself, so output never passes through the
supervisor's memory.

With a log (``log=PATH``, or ``keep_output=True`` for one in the state dir)
the descriptor is the log's, and the output file is a second name of it, as
an agent's is of its transcript: live readers see no difference, and the
terminal transition removes only that name. A caller's log is also pointed at
from the state dir (``_util.outputfile.log_path``), so readers find it by ID after
the end; retention deletes the pointer, never the caller's file.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from typing import Any, ClassVar

from workunits._core.errors import SpecError
from workunits._core.record import Outcome
from workunits._core.status import Reason, Status
from workunits._util import outputfile, shell_log
from workunits._wire import durable
from workunits._wire.actor_messages import ProcessExited, ProcessLost, ProcessSpawnFailed
from workunits._wire.specs import ShellSpec
from workunits._wire.zygote_protocol import Limits, SpawnExec
from workunits._zygote.client import _environment_for_units as environment_for_units
from workunits.actors.base import UnitBinding, WorkActor, exit_outcome


class ShellActor(WorkActor):
    """The shell kind (``b``): a command run by the zygote, its output straight into the file."""

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
        return durable.shell_to_durable(spec, timeout)

    @classmethod
    def from_durable(cls, stored: Any) -> tuple[ShellSpec, float | None]:
        return durable.shell_from_durable(stored)

    @classmethod
    def resumable(cls, stored: Any, spec_format: str) -> bool:
        return durable.shell_resumable(stored)

    def launch_early(self) -> bool:
        """A file and one request to a running zygote: quick enough for the supervisor's thread."""
        return self.unit.zygote.ready

    def launch(self) -> None:
        log = self._log()
        fd = self._open_output() if log is None else self._open_log(log)
        try:
            # The zygote forks and execs; the kernel enforces the output cap
            # (RLIMIT_FSIZE: past it the command gets SIGXFSZ).
            request = SpawnExec(
                unit_id=self.unit.id,
                argv=self.spec.argv,
                cwd=self.spec.cwd,
                env=traced_env(self.spec.env, self.unit.traceparent),
                limits=Limits(output_cap=self.spec.output_cap),
                stdin=self.unit.input_fd is not None,
                confinement=self.confinement(),
            )
            watch = self.process_watch()
            self.unit.zygote.spawn_exec(request, fd, watch, input_fd=self.unit.input_fd)
        finally:
            os.close(fd)

    def _log(self) -> str | None:
        """Where this unit's output is kept after its end, if anywhere."""
        if self.spec.log is not None:
            return self.spec.log
        if self.spec.keep_output:
            return outputfile.log_path(self.unit.state_dir, self.unit.id)
        return None

    def _open_output(self) -> int:
        # A later attempt (a retry, or a restart after its supervisor died) appends
        # to the output its earlier attempts wrote, so a reader's offset stays good;
        # a symlink planted there is refused. A first attempt removes nothing:
        # whatever is already at its path is refused by create(), not replaced.
        if self.unit.attempt > 1:
            with contextlib.suppress(FileNotFoundError):
                return outputfile.reopen_for_append(self.unit.output_path)
        return self.unit.create_file(self.unit.output_path)

    def _open_log(self, log: str) -> int:
        """The log, opened for this attempt, with the output file made a second name of it.

        As an agent's transcript: a later attempt appends to what the earlier ones
        wrote, and the dead session's output name (if any) gives way to a new one.
        """
        later = self.unit.attempt > 1
        if self.spec.log is None:  # keep_output: ours, in the state dir
            if later and os.path.lexists(log):
                fd = outputfile.reopen_for_append(log)
            else:
                fd = self.unit.create_file(log)
        else:
            # Checked at submit too; a unit that waited (pending, resumed) checks again.
            shell_log.refuse_inside(log, self.unit.state_dir)
            fd = shell_log.open_for_attempt(log, append=later)
        try:
            if self.spec.log is not None:
                shell_log.point_to(log, outputfile.log_path(self.unit.state_dir, self.unit.id))
            if later:
                outputfile.remove(self.unit.output_path)
            outputfile.link(log, self.unit.output_path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def signal_work(self, signum: int) -> None:
        self.unit.zygote.signal(self.unit.id, signum)

    def end_on_exit(self, exit_code: int | None, signum: int | None) -> Outcome:
        """Reaper thread: the exit says everything, so the end skips this actor."""
        ending = self._ending
        capped = self._reached_cap()
        file_size = self.unit.sandbox is not None and self.unit.sandbox.file_size is not None
        # SIGXFSZ with the output file short of the cap: the sandbox's file_size stopped it.
        if ending is None and (capped or (signum == signal.SIGXFSZ and not file_size)):
            ending = Reason.OUTPUT_CAP
        return exit_outcome(ending, exit_code, signum, self.limit_reason(exit_code, signum))

    def on_receive(self, message: Any) -> Any:
        match message:
            case ProcessSpawnFailed(error):
                self.finish(Outcome(Status.FAILED, error=error))
            case ProcessExited(exit_code, signum):
                # The Reaper reported the end already (end_on_exit): this only stops us.
                self.finish(self.end_on_exit(exit_code, signum))
            case ProcessLost():
                error = "lost: the zygote process that forked this unit died"
                self.finish(Outcome(Status.FAILED, reason=Reason.LOST, error=error))
            case _:
                return super().on_receive(message)
        return None

    def _reached_cap(self) -> bool:
        # A command that ignores SIGXFSZ gets EFBIG instead and exits as it likes;
        # the file stopping at the cap is what says the cap ended it.
        return outputfile.size_of(self.unit.output_path) >= self.spec.output_cap


def traced_env(env: Mapping[str, str] | None, traceparent: str | None) -> Mapping[str, str] | None:
    """The command's environment, with ``TRACEPARENT`` when its unit has a span."""
    if traceparent is None:
        return env
    return {**(environment_for_units() if env is None else env), "TRACEPARENT": traceparent}
