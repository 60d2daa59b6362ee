"""The zygote: a small single-threaded process that forks every unit process.

The supervisor process is threaded and must never fork; the zygote is started
once (exec'd, not forked), has the child runtime preloaded, and forks on
request, so a fork costs ~1 ms. Each unit process gets its own session and
process group, SIGKILL as its parent-death signal, default signal handlers and
its resource limits (``unit_process``).

A Python unit is handed to a warm process when one is waiting: forked ahead of
demand and set up already, it runs exactly that unit and exits, so no process
ever runs two units (``warm`` sizes the pool, ``spare`` is the process's side).
The zygote moves a warm process into the unit's cgroup before handing it the
unit; requests are served before spares are forked.

A unit's end takes every process it started, however it escaped its group:
with a cgroup per unit (``cgroup.kill``) where we may, else through the chain
of subreapers (see ``containment``). When the control socket closes — the
supervisor exited or was SIGKILLed — the zygote kills every unit and every
orphaned descendant (it is a child subreaper, so they come back to it), then
exits. Its guard (``guard``) does the same if the zygote itself is killed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import os
import pickle
import resource
import selectors
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from workunits._sandbox.limits import hit, remove
from workunits._sandbox.plan import Confinement
from workunits._sandbox.unit import Settings, UnitIsolation, UnitLimits
from workunits._unit import descendants
from workunits._unit.child import report_start_failure, run_unit
from workunits._util import framing
from workunits._wire.pool_protocol import WORKER_KIND
from workunits._wire.zygote_protocol import (
    PLAN_DEFAULT,
    PLAN_NONE,
    Limits,
    Ready,
    RunCommand,
    Signal,
    SpawnExec,
    SpawnFailed,
    exited,
    is_call_request,
    spawned,
)
from workunits._zygote import _linux, commands, keeper, payload, spare, unit_process
from workunits._zygote.containment import Cgroups, inside
from workunits._zygote.limit_watch import LimitWatch, kill_cgroup_members
from workunits._zygote.unit_process import EXIT_RUNTIME_BROKEN
from workunits._zygote.warm import Spare, WarmPool, WarmSettings

# A warm process reads its unit as soon as it runs; one that does not within this
# long is broken (stopped?), and the unit is forked instead.
HANDOVER_TIMEOUT = 5.0
# A unit just handed to a spare is starting, and a short one is already ending: a
# replacement forked now (the fork, then the spare's set-up) would take a core from
# it. Replacements wait this long, or until a Python unit ends, whichever is first.
SPARE_HOLD = 0.005


@dataclass(slots=True)
class Slot:
    """One unit the zygote forked: its leader (unreaped) and its cgroup, if any."""

    unit_id: str
    pid: int
    cgroup: str | None
    # A unit of the sort warm processes are for: a Python unit (not a pooled worker), or
    # a command under the default protection (cgroup mode).
    warm: bool = False
    limits: UnitLimits = dataclasses.field(default_factory=UnitLimits)  # its v1 limit cgroups
    cpu_limit: float | None = None  # seconds of CPU its tree may use (read from ``cgroup``)
    hit: str | None = None  # a limit the zygote ended it for (``limit_watch``)

    @property
    def memory_dir(self) -> str | None:
        return self.limits.memory_dir


class Zygote:
    def __init__(
        self,
        control: socket.socket,
        cgroups: Cgroups | None = None,
        warm: WarmSettings | None = None,
        isolation: UnitIsolation | None = None,
    ) -> None:
        self.control = control
        # The units' namespace, default ruleset and limit cgroups (see ``_sandbox.unit``).
        self.isolation = isolation or UnitIsolation(Settings("off"))
        # Warm processes are confined ahead (the default protection), or not at all.
        self.warm_plan = PLAN_DEFAULT if self.isolation.on else PLAN_NONE
        self.limit_watch = LimitWatch()
        # None: subreaper mode. Unit processes are subreapers, so any other child
        # of ours is an orphan of a unit that has ended, and is killed.
        self.cgroups = cgroups
        self.dying: list[str] = []  # killed unit cgroups waiting to be removed
        self.reader = framing.FrameReader()
        # Descriptors received, one group per spawn request, in order. The kernel
        # attaches one request's descriptors to at most one read; a group it had to
        # drop (MSG_CTRUNC: this process is out of descriptors) is None.
        self.fd_groups: list[list[int] | None] = []
        # Invariant: every pid here is a forked, unreaped unit leader.
        self.units: dict[int, Slot] = {}
        self.by_unit: dict[str, Slot] = {}
        self.warm_units = 0  # units among ``units`` of the sort warm processes serve
        # Invariant: every spare here is a forked, unreaped child that has run no unit.
        self.pool = WarmPool(warm or WarmSettings(0, 1.0))
        self.selector: selectors.BaseSelector | None = None
        # No spare is forked before this (monotonic) time: see SPARE_HOLD.
        self.spares_held_until = 0.0
        self.parent = os.getppid()
        self.pid = os.getpid()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    # -- set-up ---------------------------------------------------------------

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_parent_death_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides, not the terminal
        _linux.set_child_subreaper()
        # A crashing unit must not litter core files; children inherit this.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _linux.set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != self.parent:
            return self.shutdown()
        # What is loaded now is shared with every child for good: their collections
        # need not visit it (and would copy every page it lies on).
        gc.freeze()
        missing = tuple(self.isolation.missing)
        framing.send(self.control, Ready(os.getpid(), missing), plain=True)
        self.selector = selector = selectors.DefaultSelector()
        selector.register(self.control, selectors.EVENT_READ, "control")
        selector.register(self.wake_r, selectors.EVENT_READ, "signal")
        while True:
            ready = selector.select(self._timeout())
            for key, _ in ready:
                if key.data == "signal":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 512)
                    self.reap()
                elif not self.read_control():
                    return self.shutdown()
            if self.dying:
                self.dying = [path for path in self.dying if not _removed(path)]
            self.limit_watch.run(self.units.values(), self.end_for_limit)
            self.age_spares()
            if not ready and self.pool.short() and time.monotonic() >= self.spares_held_until:
                self.add_spare()  # only when no request waits: they come first

    def _timeout(self) -> float | None:
        """How long the loop may sleep: not at all while a spare is wanted."""
        if self.pool.short():
            return max(0.0, self.spares_held_until - time.monotonic())
        timeout = self.pool.next_ageing()
        if self.dying:  # killed cgroups are removed once their processes are gone
            timeout = 0.01 if timeout is None else min(timeout, 0.01)
        wait = self.limit_watch.timeout(self.units.values())
        if wait is not None:
            timeout = wait if timeout is None else min(timeout, wait)
        return timeout

    def end_for_limit(self, slot: Any) -> None:
        """A unit's tree went past a limit the watch holds (``limit_watch``): it ends whole."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(slot.pid, signal.SIGKILL)
        if slot.cgroup is not None:
            Cgroups.kill(slot.cgroup)
        elif slot.memory_dir is not None:
            kill_cgroup_members(slot.memory_dir)

    def _on_parent_death_signal(self, signum: int, frame: Any) -> None:
        # PR_SET_PDEATHSIG fires when the forking *thread* exits; only a dead
        # supervisor process is a reason to go. Its socket closing says the same.
        if os.getppid() != self.parent:
            self.shutdown()

    # -- requests ---------------------------------------------------------------

    def read_control(self) -> bool:
        try:
            data, fds, flags, _addr = socket.recv_fds(self.control, 1 << 16, 64)
        except ConnectionResetError:
            return False
        if not data:
            return False
        for fd in fds:  # a received descriptor must not leak into every later command
            os.set_inheritable(fd, False)
        if flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            self.fd_groups.append(None)
        elif fds:
            self.fd_groups.append(fds)
        for message in self.reader.feed(data):
            self.handle(message)
        return True

    def handle(self, message: Any) -> None:
        if is_call_request(message):
            _, unit_id, kind, payload_in_fd, call, plan, limits = message
            fds = self._fds_for(unit_id, 3 if payload_in_fd else 2)
            if fds is not None:
                self.spawn_call(unit_id, kind, call, fds, plan=plan, limits=limits)
        elif isinstance(message, SpawnExec):
            fds = self._fds_for(message.unit_id, message.fd_count)
            if fds is not None:
                self.spawn_exec(message, fds[0], fds[1] if message.stdin else None)
        elif isinstance(message, Signal):
            slot = self.by_unit.get(message.unit_id)
            if slot is not None:  # unreaped leader: its pid and group id are still ours
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(slot.pid, message.signum)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, message.signum)
                if message.signum == signal.SIGKILL and slot.cgroup is not None:
                    Cgroups.kill(slot.cgroup)  # a kill takes the escaped ones too, now

    def _fds_for(self, unit_id: str, wanted: int) -> list[int] | None:
        """The ``wanted`` descriptors sent with ``unit_id``'s request; None (the unit
        refused) when they were lost."""
        group = self.fd_groups.pop(0) if self.fd_groups else None
        if group is not None and len(group) == wanted:
            return group
        for fd in group or ():
            os.close(fd)
        self.refuse(
            unit_id,
            "could not start: the zygote is out of file descriptors (EMFILE: "
            "RLIMIT_NOFILE); the unit's descriptors were dropped in transit",
        )
        return None

    def refuse(self, unit_id: str, error: str) -> None:
        """Fail one unit that could not start; the zygote and every other unit carry on."""
        with contextlib.suppress(OSError):
            framing.send(self.control, SpawnFailed(unit_id, error), plain=True)

    def spawn_exec(self, msg: SpawnExec, output_fd: int, input_fd: int | None = None) -> None:
        """posix_spawn (vfork-like: no copy of this process) in a new session; a confined
        command is exec'd by a warm process (the default protection, in cgroup mode:
        confined when it was forked, ahead) or forked, and confines itself before it
        execs.

        The zygote is single-threaded, so it may briefly change its own working
        directory and file-size limit for the child to inherit. A command
        spawned so gets no parent-death signal; if the zygote itself is
        SIGKILLed, the supervisor kills the command through the pidfd it was given.
        """
        cgroup = None
        plan = msg.confinement if self.isolation.on else None
        unit_limits = UnitLimits()
        warm = None
        try:
            path = commands.resolve(msg)
            if self.cgroups is None:
                unit_limits = self._limits_for(msg.unit_id, plan, None)
                pid, shown = self._spawn_kept(
                    msg, path, output_fd, input_fd, plan=plan, limits=unit_limits
                )
            elif plan is not None and plan.is_default:
                self.pool.demand(self.warm_units + 1)
                warm = self._exec_in_spare(msg, path, output_fd, input_fd)
            if warm is not None:
                pid = shown = warm.pid
                cgroup = warm.cgroup
            elif self.cgroups is not None:
                cgroup = self.cgroups.unit_dir(msg.unit_id)
                unit_limits = self._limits_for(msg.unit_id, plan, cgroup)
                with self._inside(cgroup):
                    if plan is None:
                        pid = shown = commands.posix_spawn(msg, path, output_fd, input_fd)
                    else:  # confined: forked, confined, exec'd (``commands``)
                        limits = unit_limits
                        pid = shown = commands.fork_exec(
                            msg,
                            path,
                            output_fd,
                            input_fd,
                            ready=lambda: self._confined_unit(msg, plan, limits, output_fd),
                            env=dict(plan.env),
                        )
        except OSError as exc:
            self.refuse(msg.unit_id, commands.exec_error(msg, exc))
            if cgroup is not None:
                Cgroups.remove(cgroup)
            remove(unit_limits.directories)
            return
        finally:
            os.close(output_fd)
            if input_fd is not None:
                os.close(input_fd)  # the command has its own; the supervisor keeps the pipe
        cpu = None if plan is None else plan.cpu_seconds
        self.adopt(
            pid,
            msg.unit_id,
            cgroup,
            shown,
            warm=warm is not None,
            unit_limits=unit_limits,
            cpu_limit=cpu,
        )

    def _confined_unit(
        self, msg: SpawnExec, plan: Confinement, limits: UnitLimits, output_fd: int
    ) -> None:
        """In a child forked for a confined command: become the unit, then confine it."""
        self.become_unit(msg.limits, subreaper=False)
        self.isolation.confine(plan, limits, (output_fd,))

    def _limits_for(self, unit_id: str, plan: Confinement | None, cgroup: str | None) -> UnitLimits:
        if plan is None:
            return UnitLimits()
        return self.isolation.prepare_limits(unit_id, plan.memory, plan.processes, cgroup)

    @contextlib.contextmanager
    def _inside(self, cgroup: str) -> Iterator[None]:
        """Run the block (a fork or spawn) in ``cgroup``: the child starts there."""
        assert self.cgroups is not None
        self.cgroups.enter(cgroup)
        try:
            yield
        finally:
            if os.getpid() == self.pid:  # a forked child leaves this block too: it stays
                self.cgroups.leave()

    def _spawn_kept(
        self,
        msg: SpawnExec,
        path: str,
        output_fd: int,
        input_fd: int | None,
        *,
        plan: Confinement | None,
        limits: UnitLimits,
    ) -> tuple[int, int]:
        """Subreaper mode: fork a keeper that spawns the command; its pid leads the unit.

        Waits for the keeper's word (its end of a pipe closing, or an error text),
        so a command that cannot start fails its unit with the cause, as without
        a keeper.
        """

        def run_keeper(report_w: int) -> None:  # pragma: no cover - runs in the keeper
            try:
                self.become_unit(Limits(), subreaper=False)
                keeper.run(
                    msg,
                    path,
                    output_fd,
                    input_fd,
                    report_w,
                    isolation=self.isolation,
                    plan=plan,
                    limits=limits,
                )
            finally:
                os._exit(EXIT_RUNTIME_BROKEN)

        pid, error = commands.forked(run_keeper)  # "+PID", or "-ERRNO\0FILENAME"
        if error.startswith("+"):
            return pid, int(error[1:])
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        if not error[1:2].isdigit():
            raise OSError(errno.ECHILD, "the keeper process died before spawning")
        raise commands.rebuilt(error)

    def spawn_call(
        self,
        unit_id: str,
        kind: str,
        call: bytes,
        fds: list[int],
        *,
        plan: str = PLAN_NONE,
        limits: tuple[int | None, int | None, float | None] = (None, None, None),
    ) -> None:
        """Start the Python unit ``unit_id``; ``call`` is its pickled ``SpawnCall``, which
        only the unit's process opens (see ``zygote_protocol``); ``fds`` are its
        transcript and channel (and its payload). ``plan`` says whether a warm
        process may run it (one confined as it would be); ``limits`` are its
        memory, process and CPU limits, for its cgroups."""
        # A pooled worker lives for many units: a fork is no cost worth a spare for it.
        python_unit = kind != WORKER_KIND
        if python_unit and plan == self.warm_plan:
            self.pool.demand(self.warm_units + 1)
            while (warm := self.pool.take()) is not None:
                if self.hand_over(warm, unit_id, call, fds):
                    return
        self.fork_call(unit_id, call, fds, python_unit=python_unit, limits=limits)

    def fork_call(
        self,
        unit_id: str,
        call: bytes,
        fds: list[int],
        *,
        python_unit: bool,
        limits: tuple[int | None, int | None, float | None] = (None, None, None),
    ) -> None:
        """Fork a process for the unit (no spare was at hand, or it is a pooled worker)."""
        cgroup = None
        memory, processes, cpu = limits if self.isolation.on else (None, None, None)
        unit_limits = UnitLimits()
        try:
            if self.cgroups is None:
                unit_limits = self.isolation.prepare_limits(unit_id, memory, processes, None)
                pid = unit_process.fork()
            else:
                cgroup = self.cgroups.unit_dir(unit_id)
                unit_limits = self.isolation.prepare_limits(unit_id, memory, processes, cgroup)
                with self._inside(cgroup):
                    pid = unit_process.fork()
        except OSError as exc:  # EAGAIN (RLIMIT_NPROC, pids.max), ENOMEM: this unit only
            for fd in fds:
                os.close(fd)
            if cgroup is not None:
                Cgroups.remove(cgroup)
            remove(unit_limits.directories)
            self.refuse(
                unit_id, f"could not start: fork failed: {commands.describe_start_error(exc)}"
            )
            return
        if pid == 0:  # pragma: no cover - runs in the unit process
            code = EXIT_RUNTIME_BROKEN
            try:
                msg = pickle.loads(call)  # noqa: S301 - the supervisor's, on our socket pair
                if msg.payload_in_fd:  # read here, never in the zygote (see payload)
                    msg = dataclasses.replace(msg, payload=payload.read_fd(fds[2]))
                self.become_unit(msg.limits, subreaper=self.cgroups is None)
                self.isolation.confine(msg.confinement, unit_limits)
                code = run_unit(msg, fds[0], fds[1])
            except BaseException as exc:  # noqa: BLE001 - told on the channel, and the exit code
                report_start_failure(fds[1], exc)
                code = EXIT_RUNTIME_BROKEN
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        self.adopt(pid, unit_id, cgroup, warm=python_unit, unit_limits=unit_limits, cpu_limit=cpu)

    def hand_over(self, warm: Spare, unit_id: str, call: bytes, fds: list[int]) -> bool:
        """Give the unit to a warm process with its descriptors; False (the spare killed) if
        that failed, and then the descriptors stay ours.

        In cgroup mode the spare was forked into a cgroup of its own, which
        becomes the unit's: nothing moves on the way to the unit (moving
        another process costs a grace period of the kernel's, ~10 ms here).
        """
        try:
            _assign(warm, framing.frame(call), fds)  # the SpawnCall, passed on unopened
        except OSError:
            self.kill_spare(warm)
            return False
        finally:
            warm.sock.close()
        for fd in fds:
            os.close(fd)
        self.adopt(warm.pid, unit_id, warm.cgroup, warm=True)
        self.spares_held_until = time.monotonic() + SPARE_HOLD
        return True

    def _exec_in_spare(
        self, msg: SpawnExec, path: str, output_fd: int, input_fd: int | None
    ) -> Spare | None:
        """Have a warm process exec the command ``path`` (``spare``): the spare now the
        unit's process, or None when no spare was at hand.

        The spare was confined with the default protection when it was forked,
        so the unit's way in has no fork: the confinement was applied where a
        fork already happened. Waits for the exec (the assignment socket closes)
        or for the error the spare reports; then the spare is reaped, its cgroup
        removed and the error raised (OSError), as for a forked command.
        """
        fds = [output_fd] if input_fd is None else [output_fd, input_fd]
        data = framing.encode_plain(RunCommand(msg, path))
        while (warm := self.pool.take()) is not None:
            try:
                _assign(warm, data, fds)
                error = commands.read_all(warm.sock)  # a spare stuck this long is killed
            except OSError:
                self.kill_spare(warm)
                continue
            finally:
                warm.sock.close()
            self.spares_held_until = time.monotonic() + SPARE_HOLD
            if not error:
                return warm
            with contextlib.suppress(ChildProcessError):
                os.waitpid(warm.pid, 0)
            if warm.cgroup is not None:
                Cgroups.remove(warm.cgroup)
            raise commands.rebuilt(error)
        return None

    def add_spare(self) -> None:
        """Fork one warm process (into a new cgroup, in cgroup mode).

        If that fails, stop trying until demand grows.
        """
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:  # EMFILE: units come first; forked on demand they need fewer
            self.pool.give_up()
            return
        cgroup = None
        try:
            if self.cgroups is None:
                pid = unit_process.fork()
            else:
                cgroup = self.cgroups.spare_dir()
                with self._inside(cgroup):
                    pid = unit_process.fork()
        except OSError:
            ours.close()
            theirs.close()
            if cgroup is not None:
                Cgroups.remove(cgroup)
            self.pool.give_up()
            return
        if pid == 0:  # pragma: no cover - runs in the warm process
            code = EXIT_RUNTIME_BROKEN
            try:
                ours.close()
                self.forget_zygote()
                unit_process.detach(self.pid, subreaper=self.cgroups is None)
                # Confined now, before its threads: a unit's own policy needs a fresh fork.
                self.isolation.confine(Confinement() if self.isolation.on else None)
                code = spare.run(theirs, self.pool.settings.rehearse_after)
            except BaseException:  # noqa: BLE001 - the exit code carries it; nothing to report to
                code = EXIT_RUNTIME_BROKEN
            finally:
                os._exit(code)
        theirs.close()
        self.pool.add(pid, ours, cgroup)

    def age_spares(self) -> None:
        """Kill the spares that waited too long unused."""
        for old in self.pool.aged():
            self.kill_spare(old)

    def kill_spare(self, warm: Spare) -> None:
        """Kill a spare taken out of the pool (unreaped, so the pid is still its); reaped as
        a stranger, its cgroup removed once empty."""
        warm.sock.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(warm.pid, signal.SIGKILL)
        if warm.cgroup is not None:
            Cgroups.kill(warm.cgroup)
            self.dying.append(warm.cgroup)

    def adopt(
        self,
        pid: int,
        unit_id: str,
        cgroup: str | None,
        shown: int | None = None,
        *,
        warm: bool = False,
        unit_limits: UnitLimits = UnitLimits(),  # noqa: B008 - frozen
        cpu_limit: float | None = None,
    ) -> None:
        """Hold the unit's leader ``pid``; the supervisor gets its pidfd and ``shown``.

        ``shown`` is the pid its record shows: the command's, under a keeper.
        """
        # The child is unreaped, so the pid is still its: the pidfd cannot name a stranger.
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:  # EMFILE: without a pidfd the supervisor cannot hold the unit
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # its own new group; reaped as a stranger
            if cgroup is not None:
                Cgroups.kill(cgroup)
                self.dying.append(cgroup)
            self.refuse(unit_id, f"could not start: no pidfd: {commands.describe_start_error(exc)}")
            self.dying.extend(unit_limits.directories)
            return
        slot = Slot(unit_id, pid, cgroup, warm, unit_limits, cpu_limit)
        self.units[pid] = slot
        self.by_unit[unit_id] = slot
        self.warm_units += warm
        try:
            framing.send(self.control, spawned(unit_id, shown or pid), [pidfd], plain=True)
        finally:
            os.close(pidfd)

    def become_unit(self, limits: Limits, *, subreaper: bool) -> None:
        """In a child forked for a unit: leave the zygote behind, take the unit's limits.

        Its confinement comes next (``isolation.confine``), which every forked
        child calls, confined or not: it closes the isolation's descriptors.
        """
        self.forget_zygote()
        unit_process.detach(self.pid, subreaper=subreaper)
        unit_process.apply_limits(limits)

    def forget_zygote(self) -> None:
        """In a forked child: close every descriptor of the zygote's.

        The control socket, the wake-up pipe, the selector, our cgroup's, the
        spares' sockets and other units' descriptors still in transit: a unit
        process holds nothing of the zygote's or of another unit.
        """
        signal.set_wakeup_fd(-1)
        self.control.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        if self.selector is not None:
            self.selector.close()
        if self.cgroups is not None:
            self.cgroups.close()
        for warm in self.pool:
            warm.sock.close()
        for group in self.fd_groups:
            for fd in group or ():
                os.close(fd)

    # -- exits ------------------------------------------------------------------

    def reap(self) -> None:
        """Collect every exited child; report unit leaders, silently reap orphans."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            pid = info.si_pid
            slot = self.units.pop(pid, None)
            if slot is not None:
                self.end(slot)
            else:
                gone = self.pool.remove(pid)  # a spare died before it had a unit
                if gone is not None:
                    self.kill_spare(gone)
            try:
                _, status, usage = os.wait4(pid, 0)
            except ChildProcessError:
                if slot is not None and slot.cgroup is not None:
                    self.dying.append(slot.cgroup)  # removed by the loop once empty
                continue
            if slot is not None:
                _note_cpu(slot, usage)
            if self.cgroups is None:
                # Orphans of ended units (and their orphans, round by round) came back to us.
                _linux.kill_tree_round(self.pid, spare=self.units.keys() | self.pool.pids())
            if slot is not None:
                self.report_exit(slot, pid, status)
            if self.cgroups is not None:
                self.kill_escaped()  # after the report: cgroup.kill already took the unit

    def kill_escaped(self) -> None:
        """In cgroup mode: SIGKILL each orphan that came back to us from outside every
        running unit's cgroup.

        A unit's processes are not subreapers here, so a running unit's orphan
        comes back to us too; inside its unit's cgroup it is that unit's, and
        cgroup.kill takes it at the unit's end. One outside every unit's cgroup
        left its unit's (root may move processes between cgroups), and no
        cgroup.kill will take it: it ends now, as its orphans will when they
        come back (each death is a reap, and the next round).
        """
        ours = self.units.keys() | self.pool.pids()
        orphans = [pid for pid in descendants.children(self.pid) if pid not in ours]
        if not orphans:
            return
        running = {slot.cgroup for slot in self.units.values() if slot.cgroup is not None}
        for pid in orphans:
            where = descendants.cgroup_of(pid)
            if where is not None and inside(where, running):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def report_exit(self, slot: Slot, pid: int, status: int) -> None:
        """The unit's leader is reaped: tell the supervisor how it ended."""
        self.by_unit.pop(slot.unit_id, None)
        self.warm_units -= slot.warm
        if slot.warm:
            self.spares_held_until = 0.0
        if os.WIFSIGNALED(status):
            exit_code, signum = None, os.WTERMSIG(status)
        else:
            exit_code, signum = os.waitstatus_to_exitcode(status), None
        limit = slot.hit
        if limit is None and slot.limits.by_cgroup:  # the kernel's counters say
            limit = hit((*slot.limits.directories, *((slot.cgroup,) if slot.cgroup else ())))
        report = exited(slot.unit_id, pid, exit_code, signum, limit)
        with contextlib.suppress(OSError):
            framing.send(self.control, report, plain=True)
        # After the report, not before: every process of the unit was killed in end();
        # removing its emptied cgroup is housekeeping the unit's end need not wait for.
        for path in (*((slot.cgroup,) if slot.cgroup else ()), *slot.limits.directories):
            if not _removed(path):
                self.dying.append(path)

    def end(self, slot: Slot) -> None:
        """The unit's leader has exited (unreaped): kill everything the unit started."""
        # Stragglers in the group die with the leader; its zombie pins the group id.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(slot.pid, signal.SIGKILL)
        if slot.cgroup is not None:
            Cgroups.kill(slot.cgroup)

    def shutdown(self) -> None:
        """Kill every unit, its cgroup, every spare and every orphaned descendant, then exit."""
        if os.getpid() != self.pid:  # a forked child, with a copy of our tables: not ours
            os._exit(EXIT_RUNTIME_BROKEN)
        for pid in [*self.units, *self.pool.pids()]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if self.cgroups is not None:
            Cgroups.kill(self.cgroups.root)
        deadline = time.monotonic() + 5.0
        me = os.getpid()
        while time.monotonic() < deadline:
            children = descendants.child_pids(me)
            if not children:
                break
            for pid in children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
        os._exit(0)


def _note_cpu(slot: Slot, usage: resource.struct_rusage) -> None:
    """A leader that used its CPU seconds died of RLIMIT_CPU (SIGXCPU, or the SIGKILL of the
    hard limit when it ignored that): say so, as its cgroup's watch would."""
    used = usage.ru_utime + usage.ru_stime
    if slot.cpu_limit is not None and slot.hit is None and used >= slot.cpu_limit:
        slot.hit = "cpu-limit"


def _assign(warm: Spare, data: bytes, fds: list[int]) -> None:
    """Send a spare its one unit with the unit's descriptors, within the hand-over timeout."""
    warm.sock.settimeout(HANDOVER_TIMEOUT)
    sent = socket.send_fds(warm.sock, [data], fds)
    if sent < len(data):  # sendall(b"") still sends, to a spare that may have read all
        warm.sock.sendall(data[sent:])


def _removed(path: str) -> bool:
    """Remove an emptied cgroup directory; False while processes are still dying in it."""
    try:
        return Cgroups.remove(path)
    except OSError:
        return True  # not ours to remove after all (gone, or never a cgroup): forget it
