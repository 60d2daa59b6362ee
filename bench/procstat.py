"""Readings of this process from /proc (Linux), so the bench needs no psutil.

All figures are for the whole process: every thread of the supervisor counts,
and the unit processes (children) do not.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> float:
    """User + system CPU of this process (all threads), from getrusage (microsecond grain)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy_seconds() -> float:
    """CPU time every CPU of the machine spent busy (user, nice, system, irq, softirq),
    from /proc/stat: with ``cpu_seconds``, what the rest of the machine (a unit's
    worker, the zygote, the kernel's threads) spent beside this process."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(v) for v in f.readline().split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / _CLK_TCK


def cpu_seconds_proc() -> float:
    """The same figure from /proc/self/stat (utime + stime, clock-tick grain)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        text = f.read()
    # The command name (field 2) may hold spaces; the fields after it are fixed.
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    return (utime + stime) / _CLK_TCK


def thread_cpu_reader(name: str) -> Callable[[], float]:
    """A reader of the CPU seconds of this process's live thread ``name`` (nanosecond
    grain, through its CPU-time clock), or of 0.0 when no thread has that name."""
    for thread in threading.enumerate():
        if thread.name == name and thread.ident is not None:
            clock = time.pthread_getcpuclockid(thread.ident)
            return lambda: time.clock_gettime(clock)
    return lambda: 0.0


def thread_cpu_seconds() -> dict[int, float]:
    """User + system CPU of each live thread of this process, by native thread ID."""
    out: dict[int, float] = {}
    for name in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{name}/stat", encoding="ascii") as f:
                text = f.read()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out[int(name)] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return out


def thread_families() -> dict[int, str]:
    """Live threads by native ID, each named by its family (``SupervisorActor-3`` ->
    ``SupervisorActor``): one line per kind of thread."""
    out: dict[int, str] = {}
    for thread in threading.enumerate():
        if thread.native_id:
            head, _, tail = thread.name.rpartition("-")
            out[thread.native_id] = head if head and tail.isdigit() else thread.name
    return out


def cpu_by_family(
    families: dict[int, str], before: dict[int, float], after: dict[int, float]
) -> dict[str, float]:
    """CPU seconds per thread family between two ``thread_cpu_seconds()`` readings,
    of the threads alive at both (those that ended between are not in it)."""
    per: dict[str, float] = {}
    for tid, family in families.items():
        if tid in before and tid in after:
            per[family] = per.get(family, 0.0) + after[tid] - before[tid]
    return per


def context_switches() -> tuple[int, int]:
    """Voluntary and involuntary context switches of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw, usage.ru_nivcsw


@dataclass(frozen=True, slots=True)
class Memory:
    rss: int  # bytes resident now (VmRSS)
    hwm: int  # peak resident bytes since start or the last reset_peak() (VmHWM)
    threads: int


def memory() -> Memory:
    values: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024  # reported in kB
            elif key == "Threads":
                values[key] = int(rest)
    return Memory(rss=values["VmRSS"], hwm=values["VmHWM"], threads=values["Threads"])


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def raise_nofile() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the limits now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_pids_max() -> int | None:
    """pids.max of this process's cgroup (v2, or the v1 pids controller); None if unlimited."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            found = _read_int(f"/sys/fs/cgroup{path}/pids.max")
        elif "pids" in controllers.split(","):
            found = _read_int(f"/sys/fs/cgroup/pids{path}/pids.max")
        else:
            continue
        if found is not None:
            return found
    return None


def task_limits() -> dict[str, int]:
    """The limits that bound how many threads + processes this user may have at once."""
    limits: dict[str, int] = {}
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY:
        limits["RLIMIT_NPROC"] = soft
    for name, path in (
        ("threads-max", "/proc/sys/kernel/threads-max"),
        ("pid_max", "/proc/sys/kernel/pid_max"),
    ):
        value = _read_int(path)
        if value is not None:
            limits[name] = value
    pids_max = _cgroup_pids_max()
    if pids_max is not None:
        limits["cgroup pids.max"] = pids_max
    return limits


class PeakSampler:
    """Samples VmRSS in a thread every ``interval`` seconds; ``peak`` is the highest seen."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, memory().rss)
            self.samples += 1
            time.sleep(self.interval)

    def __enter__(self) -> PeakSampler:
        self.peak = memory().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, memory().rss)
