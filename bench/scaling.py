"""How cost grows (issue 18, item 5): latency and supervisor CPU against live units and ledger size.

    python bench/scaling.py [--quick] [--units 10,100,1000,5000] [--rows 10000,100000,1000000]
                            [--markdown PATH] [--plot PATH] [--json PATH]

Two sweeps, each at growing sizes in one supervisor (or one state dir):

* **live units**: N shell units (``sleep 3600``, real processes forked by the
  zygote, each with its actor, pidfd and output file) are held running idle;
  at each N we measure the supervisor's CPU over an idle window, its RSS growth
  per unit, and then, with the N still running, agent submit -> result and shell
  ``true`` submit -> terminal, and the supervisor CPU each of those units cost.
* **ledger size**: the ledger is filled with ended units (10k, 100k, 1M rows) by
  cloning one real ended row in a single ``INSERT ... SELECT`` (the shape a
  long-lived ledger has: ended units waiting for their retention to expire);
  at each size a supervisor is started on it (start time measured) and the same
  latencies and CPU per unit are taken.

All figures are of this process (the supervisor runs here), from getrusage and
/proc as ``procstat`` reads them. The machine is shared: the 1-minute load
average is recorded beside each row, and the figures to compare are the ratios
between sizes, set against the log of the size ratio (the claim under test:
no per-unit cost grows faster than the log of the work).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import procstat
from peer_benches import trivial

import workunits as wu

HERE = Path(__file__).resolve().parent
KIB = 1 << 10
EVICT_SOON = 1.0
SECTION = "## Issue 18, item 5: how cost grows"


@dataclass
class Point:
    """The figures at one size of one sweep."""

    sweep: str  # "live units" or "ledger rows"
    size: int
    agent_ms: float = math.nan  # median agent submit -> result
    shell_ms: float = math.nan  # median shell `true` submit -> terminal
    agent_cpu_ms: float = math.nan  # supervisor CPU per agent unit, idle cost taken out
    shell_cpu_ms: float = math.nan
    idle_cpu_pct: float = math.nan  # supervisor CPU with the size held idle, % of one core
    rss_per_unit_kib: float = math.nan  # live units only
    start_s: float = math.nan  # ledger rows only: Supervisor() start on that ledger
    load: tuple[float, float] = (math.nan, math.nan)  # 1-min load average before / after
    info: dict[str, Any] = field(default_factory=dict)


def loadavg() -> float:
    return os.getloadavg()[0]


@contextlib.contextmanager
def state_dir(name: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"workunits-scaling-{name}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def idle_cpu(window: float) -> float:
    """This process's CPU over ``window`` seconds, as % of one core."""
    c0, t0 = procstat.cpu_seconds(), time.monotonic()
    time.sleep(window)
    return 100.0 * (procstat.cpu_seconds() - c0) / (time.monotonic() - t0)


def timed_units(one: Callable[[], None], reps: int, idle_pct: float) -> tuple[list[float], float]:
    """``reps`` calls of ``one`` in a row: their latencies, and CPU per call beyond idle."""
    samples: list[float] = []
    c0, w0 = procstat.cpu_seconds(), time.monotonic()
    for _ in range(reps):
        start = time.perf_counter()
        one()
        samples.append(time.perf_counter() - start)
    cpu, wall = procstat.cpu_seconds() - c0, time.monotonic() - w0
    return samples, max(cpu - wall * idle_pct / 100.0, 0.0) / reps


def measure_units(sup: wu.Supervisor, point: Point, reps: int, idle_pct: float) -> None:
    """Agent and shell latency and CPU per unit, alternating in blocks of ``reps``."""

    def agent() -> None:
        if sup.result(sup.agent(trivial, 1).id, timeout=60) != 2:
            raise AssertionError("trivial(1) did not return 2")

    def shell() -> None:
        record = sup.wait(sup.shell(["true"]).id, timeout=60)
        if record.status is not wu.Status.COMPLETED:
            raise AssertionError(record.describe_end())

    for _ in range(3):  # warm: lazy imports, warm processes sized to demand
        agent()
        shell()
    agents: list[float] = []
    shells: list[float] = []
    agent_cpu: list[float] = []
    shell_cpu: list[float] = []
    block = max(reps // 3, 1)
    for _ in range(3):  # three alternating blocks, so drift hits both kinds alike
        s, c = timed_units(agent, block, idle_pct)
        agents += s
        agent_cpu.append(c)
        s, c = timed_units(shell, block, idle_pct)
        shells += s
        shell_cpu.append(c)
    point.agent_ms = 1e3 * statistics.median(agents)
    point.shell_ms = 1e3 * statistics.median(shells)
    point.agent_cpu_ms = 1e3 * statistics.median(agent_cpu)
    point.shell_cpu_ms = 1e3 * statistics.median(shell_cpu)


# -- live units ---------------------------------------------------------------------


def wait_running(sup: wu.Supervisor, ids: list[str], timeout: float = 300) -> int:
    """Poll until every unit in ``ids`` runs with a pid; return how many do."""
    wanted = set(ids)
    deadline = time.monotonic() + timeout
    while True:
        running = {r.id for r in sup.list(status="running") if r.pid is not None}
        if wanted <= running or time.monotonic() > deadline:
            return len(wanted & running)
        time.sleep(0.2)


def sweep_live_units(sizes: list[int], reps: int, window: float, last_window: float) -> list[Point]:
    soft, hard = procstat.raise_nofile()
    print(f"live units: RLIMIT_NOFILE {soft}/{hard}, task limits {procstat.task_limits()}")
    points: list[Point] = []
    with state_dir("units") as state:
        sup = wu.Supervisor(state, eviction_grace=EVICT_SOON)
        ids: list[str] = []
        try:
            for _ in range(5):
                sup.wait(sup.shell(["true"]).id, timeout=30)
            gc.collect()
            time.sleep(1.0)
            base_rss = procstat.memory().rss
            base_idle = idle_cpu(window)
            print(f"  no units: idle {base_idle:.2f} %, RSS {base_rss / 2**20:.1f} MiB")
            for size in sizes:
                point = Point("live units", size)
                load0 = loadavg()
                t0 = time.monotonic()
                while len(ids) < size:
                    ids.append(sup.shell(["sleep", "3600"]).id)
                running = wait_running(sup, ids)
                point.info["start_all_s"] = time.monotonic() - t0
                if running != len(ids):
                    raise RuntimeError(f"only {running} of {len(ids)} idle units are running")
                gc.collect()
                time.sleep(2.0)  # every actor thread settles into its blocking read
                rss = procstat.memory()
                point.rss_per_unit_kib = (rss.rss - base_rss) / size / KIB
                point.info.update(
                    threads=rss.threads, fds=procstat.open_fds(), idle_no_units=base_idle
                )
                point.idle_cpu_pct = idle_cpu(last_window if size == sizes[-1] else window)
                measure_units(sup, point, reps, point.idle_cpu_pct)
                still = wait_running(sup, ids, timeout=5)
                if still != len(ids):
                    raise RuntimeError(f"{len(ids) - still} idle units stopped while measured")
                point.load = (load0, loadavg())
                report(point)
                points.append(point)
        finally:
            t0 = time.monotonic()
            # Every kill sent, then every end awaited (killing and waiting one by one
            # took 13 minutes for 5,000 on a loaded machine).
            with contextlib.suppress(wu.WorkunitsError):
                killed = [work_id for work_id in ids if sup.kill(work_id)]
                for work_id in killed:
                    sup.wait(work_id, timeout=120)
            print(f"  killed {len(ids)} idle units in {time.monotonic() - t0:.1f} s")
            sup.close()
    return points


# -- ledger size --------------------------------------------------------------------


def fill_ledger(db: Path, template: str, rows: int, start: int) -> float:
    """Clone the ended unit ``template`` into rows ``start`` .. ``rows - 1``; seconds taken.

    IDs are ``b`` + the row number in 8 digits (digits are in the ID alphabet),
    so they never collide with minted IDs of the same length by chance alone.
    """
    t0 = time.monotonic()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(units)")]
        rest = [c for c in columns if c != "id"]
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            f"""
            WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
            INSERT INTO units (id, {", ".join(rest)})
            SELECT 'b' || printf('%08d', n.i), {", ".join("t." + c for c in rest)}
            FROM n, units AS t WHERE t.id = ?
            """,  # noqa: S608 - column names come from the table itself
            (start, rows, template),
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (count,) = conn.execute("SELECT count(*) FROM units").fetchone()
    finally:
        conn.close()
    if count < rows:
        raise RuntimeError(f"the ledger holds {count} rows, wanted {rows}")
    return time.monotonic() - t0


def sweep_ledger_rows(sizes: list[int], reps: int, window: float) -> list[Point]:
    points: list[Point] = []
    with state_dir("ledger") as state:
        with wu.Supervisor(state) as sup:
            template = sup.shell(["true"]).id
            sup.wait(template, timeout=30)
        db = state / "ledger.db"
        filled = 0
        for size in sizes:
            point = Point("ledger rows", size)
            point.info["fill_s"] = fill_ledger(db, template, size, filled)
            filled = size
            point.info["ledger_mib"] = db.stat().st_size / 2**20
            load0 = loadavg()
            gc.collect()
            t0 = time.monotonic()
            sup = wu.Supervisor(state, eviction_grace=EVICT_SOON)
            point.start_s = time.monotonic() - t0
            try:
                point.idle_cpu_pct = idle_cpu(window)
                measure_units(sup, point, reps, point.idle_cpu_pct)
                t1 = time.perf_counter()
                sup.get(template)  # an ended unit only the ledger knows
                point.info["get_ended_ms"] = 1e3 * (time.perf_counter() - t1)
            finally:
                sup.close()
            point.load = (load0, loadavg())
            report(point)
            points.append(point)
    return points


# -- output -------------------------------------------------------------------------


def report(p: Point) -> None:
    print(
        f"  {p.sweep} {p.size:>9,}: agent {p.agent_ms:.2f} ms, shell {p.shell_ms:.2f} ms, "
        f"CPU/unit agent {p.agent_cpu_ms:.2f} ms shell {p.shell_cpu_ms:.2f} ms, "
        f"idle {p.idle_cpu_pct:.2f} %, RSS/unit {p.rss_per_unit_kib:.1f} KiB, "
        f"start {p.start_s:.2f} s, load {p.load[0]:.2f}->{p.load[1]:.2f} {p.info}",
        flush=True,
    )


def fmt(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


FIGURES = (
    ("agent submit → result, ms", "agent_ms"),
    ("shell `true` submit → terminal, ms", "shell_ms"),
    ("supervisor CPU per agent, ms", "agent_cpu_ms"),
    ("supervisor CPU per shell, ms", "shell_cpu_ms"),
)


def markdown(units: list[Point], rows: list[Point], wall: float) -> str:
    lines = [
        SECTION,
        "",
        f"`python bench/scaling.py` ({wall:.0f} s wall, {os.cpu_count()} CPUs, shared machine). "
        "Medians; CPU per unit is the supervisor process's CPU over a block of units "
        "in a row, less its idle rate over the same wall time. Load is the 1-minute "
        "load average before → after each row.",
        "",
    ]
    for title, points, extra in (
        ("Live idle units held running", units, ("idle CPU %", "RSS/unit KiB")),
        ("Ended rows already in the ledger", rows, ("idle CPU %", "start s")),
    ):
        if not points:
            continue
        lines += [
            f"**{title}**",
            "",
            "| size | agent ms | shell ms | CPU/agent ms | CPU/shell ms | "
            + " | ".join(extra)
            + " | load |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for p in points:
            last = fmt(p.rss_per_unit_kib, 1) if points is units else fmt(p.start_s)
            lines.append(
                f"| {p.size:,} | {fmt(p.agent_ms)} | {fmt(p.shell_ms)} | {fmt(p.agent_cpu_ms)} "
                f"| {fmt(p.shell_cpu_ms)} | {fmt(p.idle_cpu_pct)} | {last} "
                f"| {p.load[0]:.2f} → {p.load[1]:.2f} |"
            )
        first, last_p = points[0], points[-1]
        bound = math.log(last_p.size) / math.log(first.size)
        ratios = ", ".join(
            f"{name.split(',')[0]} {getattr(last_p, attr) / getattr(first, attr):.2f}x"
            for name, attr in FIGURES
            if getattr(first, attr) > 0
        )
        lines += [
            "",
            f"From {first.size:,} to {last_p.size:,} ({last_p.size / first.size:,.0f}x the "
            f"work; log bound {bound:.2f}x): {ratios}.",
            "",
        ]
    return "\n".join(lines)


def plot(units: list[Point], rows: list[Point], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    for row, (points, label) in enumerate(
        ((units, "live idle units"), (rows, "ended rows in the ledger"))
    ):
        if not points:
            continue
        xs = [p.size for p in points]
        ax = axes[row][0]
        ax.plot(xs, [p.agent_ms for p in points], "o-", label="agent submit → result")
        ax.plot(xs, [p.shell_ms for p in points], "s-", label="shell true submit → terminal")
        ax.set_ylabel("latency, ms (median)")
        ax = axes[row][1]
        ax.plot(xs, [p.agent_cpu_ms for p in points], "o-", label="per agent")
        ax.plot(xs, [p.shell_cpu_ms for p in points], "s-", label="per shell")
        ax.set_ylabel("supervisor CPU per unit, ms")
        ax = axes[row][2]
        ax.plot(xs, [p.idle_cpu_pct for p in points], "o-", label="idle CPU, % of a core")
        if points is units:
            ax.plot(xs, [p.rss_per_unit_kib for p in points], "s-", label="RSS per unit, KiB")
            ax.axhline(2.0, color="grey", ls=":", lw=1)
            ax.axhline(32.0, color="grey", ls="--", lw=1)
        else:
            ax.plot(xs, [100 * p.start_s for p in points], "s-", label="start, 10 ms")
        for ax in axes[row]:
            ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylim(bottom=0)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("workunits: how cost grows (issue 18, item 5)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def replace_section(path: Path, text: str) -> None:
    """Put ``text`` in place of the section SECTION of ``path`` (appended when absent)."""
    old = path.read_text() if path.exists() else ""
    start = old.find(SECTION)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    else:
        end = old.find("\n## ", start + len(SECTION))
        new = old[:start] + text + "\n" + ("" if end < 0 else old[end:])
    path.write_text(new)


def sizes(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, short windows")
    parser.add_argument("--units", type=sizes, default=None)
    parser.add_argument("--rows", type=sizes, default=None)
    parser.add_argument("--reps", type=int, default=None, help="units timed per size and kind")
    parser.add_argument("--markdown", type=Path, default=None, help="replace the section here")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    quick = args.quick
    units = args.units or ([10, 100, 500] if quick else [10, 100, 1000, 5000])
    rows = args.rows or ([10_000, 100_000] if quick else [10_000, 100_000, 1_000_000])
    reps = args.reps or (15 if quick else 45)
    window = 2.0 if quick else 5.0
    started = time.monotonic()
    unit_points = sweep_live_units(units, reps, window, 5.0 if quick else 20.0)
    row_points = sweep_ledger_rows(rows, reps, window)
    wall = time.monotonic() - started
    text = markdown(unit_points, row_points, wall)
    print(text)
    if args.markdown:
        replace_section(args.markdown, text)
    if args.plot:
        plot(unit_points, row_points, args.plot)
    if args.json:
        args.json.write_text(
            json.dumps([asdict(p) for p in unit_points + row_points], indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
