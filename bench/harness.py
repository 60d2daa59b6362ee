"""A small bench harness: repeated samples, alternating pairs, checks, JSON and Markdown.

A workload is a callable that does one repetition and returns the figure it
measured (usually seconds), so set-up that must not be timed stays outside the
measured span. Comparisons run the two sides alternately (A, B, A, B, ...) in
one process so that drift on a shared machine hits both sides alike; the pair
ratio ``a[i] / b[i]`` is taken per pair, and its median is the robust figure.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Workload = Callable[[], float]


@dataclass
class Series:
    """Every sample of one workload, in ``unit`` (seconds unless said otherwise)."""

    name: str
    samples: list[float]
    unit: str = "s"

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)


@dataclass
class Pair:
    """Two series measured alternately; ``a`` is the subject, ``b`` the baseline."""

    name: str
    a: Series
    b: Series

    @property
    def pair_ratios(self) -> list[float]:
        return [x / y for x, y in zip(self.a.samples, self.b.samples, strict=True) if y > 0]

    @property
    def ratio_of_medians(self) -> float:
        return self.a.median / self.b.median

    @property
    def median_pair_ratio(self) -> float:
        return statistics.median(self.pair_ratios)


@dataclass
class Check:
    """One target: ``measured <= limit`` passes."""

    what: str
    target: str
    limit: float
    measured: float
    shown: str  # the measured figure as printed, with its unit

    @property
    def passed(self) -> bool:
        return self.measured <= self.limit


@dataclass
class BenchResult:
    name: str
    series: list[Series] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    def check(self, what: str, target: str, limit: float, measured: float, shown: str) -> Check:
        """Record a target and print its verdict at once."""
        found = Check(what, target, limit, measured, shown)
        self.checks.append(found)
        verdict = "PASS" if found.passed else "MISS"
        print(f"  [{verdict}] {self.name} {what}: target {target}, measured {shown}", flush=True)
        return found

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)


def result_from_json(entry: dict[str, Any]) -> BenchResult:
    """Rebuild a BenchResult written by ``asdict`` (a bench run in a child process)."""

    def series(d: dict[str, Any]) -> Series:
        return Series(d["name"], [float(x) for x in d["samples"]], d["unit"])

    return BenchResult(
        name=entry["name"],
        series=[series(s) for s in entry["series"]],
        pairs=[Pair(p["name"], series(p["a"]), series(p["b"])) for p in entry["pairs"]],
        checks=[
            Check(c["what"], c["target"], c["limit"], c["measured"], c["shown"])
            for c in entry["checks"]
        ],
        info=dict(entry["info"]),
        notes=list(entry["notes"]),
        error=entry["error"],
        seconds=float(entry["seconds"]),
    )


def repeat(fn: Workload, reps: int, warmup: int = 0) -> list[float]:
    """Run ``fn`` ``warmup`` times unrecorded, then ``reps`` times; return the samples."""
    for _ in range(warmup):
        fn()
    return [fn() for _ in range(reps)]


def alternate(
    a: Workload, b: Workload, reps: int, warmup: int = 0
) -> tuple[list[float], list[float]]:
    """Warm both up, then run A, B, A, B, ... ``reps`` pairs; return both sample lists."""
    for _ in range(warmup):
        a()
        b()
    xs: list[float] = []
    ys: list[float] = []
    for _ in range(reps):
        xs.append(a())
        ys.append(b())
    return xs, ys


def timed(fn: Callable[[], object]) -> Workload:
    """A workload timing the whole of ``fn`` with ``perf_counter``."""

    def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return run


# -- reports ------------------------------------------------------------------


def environment(argv: list[str]) -> dict[str, Any]:
    """What the figures depend on; nothing that names the machine or its paths."""
    commit = ""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607 - git from PATH, on purpose
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).resolve().parent,
        )
        commit = found.stdout.strip()
    except OSError:
        pass
    return {
        "argv": argv,
        "commit": commit,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "loadavg_at_start": list(os.getloadavg()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def to_json(env: dict[str, Any], results: Iterable[BenchResult]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for r in results:
        entry = asdict(r)
        entry["summary"] = {
            "series": {
                s.name: {
                    "unit": s.unit,
                    "n": len(s.samples),
                    "median": s.median,
                    "min": s.min,
                    "max": s.max,
                }
                for s in r.series
                if s.samples
            },
            "pairs": {
                p.name: {
                    "ratio_of_medians": p.ratio_of_medians,
                    "median_pair_ratio": p.median_pair_ratio,
                }
                for p in r.pairs
                if p.pair_ratios
            },
            "checks": [{"what": c.what, "passed": c.passed} for c in r.checks],
        }
        out.append(entry)
    return {"environment": env, "benches": out}


def write_json(path: Path, env: dict[str, Any], results: Iterable[BenchResult]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_json(env, results), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def fmt(value: float, unit: str) -> str:
    """A figure with a readable unit: seconds as ms or us, bytes as KiB or MiB."""
    if unit == "s":
        if abs(value) < 1e-3:
            text = f"{value * 1e6:.1f} us"
        elif abs(value) < 10:
            text = f"{value * 1e3:.3f} ms"
        else:
            text = f"{value:.2f} s"
    elif unit == "B":
        big = abs(value) >= 1 << 20
        text = f"{value / (1 << 20):.2f} MiB" if big else f"{value / 1024:.1f} KiB"
    elif unit == "%":
        text = f"{value:.2f} %"
    elif unit == "x":
        text = f"{value:.2f}x"
    elif unit.endswith("/s"):
        text = f"{value:,.0f} {unit}"
    else:
        text = f"{value:.4g} {unit}"
    return text


def markdown(results: list[BenchResult]) -> str:
    lines = [
        "| bench | workload | n | median | min | max |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for r in results:
        for s in r.series:
            if s.samples:
                lines.append(
                    f"| {r.name} | {s.name} | {len(s.samples)} | {fmt(s.median, s.unit)} "
                    f"| {fmt(s.min, s.unit)} | {fmt(s.max, s.unit)} |"
                )
    pairs = [(r, p) for r in results for p in r.pairs if p.pair_ratios]
    if pairs:
        lines += [
            "",
            "| bench | A / B | median A | median B | ratio of medians | median of pair ratios |",
            "|---|---|--:|--:|--:|--:|",
        ]
        for r, p in pairs:
            lines.append(
                f"| {r.name} | {p.a.name} / {p.b.name} | {fmt(p.a.median, p.a.unit)} "
                f"| {fmt(p.b.median, p.b.unit)} | {p.ratio_of_medians:.2f}x "
                f"| {p.median_pair_ratio:.2f}x |"
            )
    lines += ["", "| bench | target | measured | result |", "|---|---|--:|---|"]
    for r in results:
        if r.error is not None:
            lines.append(f"| {r.name} | (did not finish) | {r.error.splitlines()[-1]} | ERROR |")
        for c in r.checks:
            verdict = "pass" if c.passed else "**miss**"
            lines.append(f"| {r.name} | {c.what} {c.target} | {c.shown} | {verdict} |")
    loads = [(r.name, r.info["loadavg_1min"]) for r in results if "loadavg_1min" in r.info]
    if loads:
        shown = ", ".join(f"{name} {a:.2f} -> {b:.2f}" for name, (a, b) in loads)
        lines += ["", f"1-minute load average over each bench ({os.cpu_count()} CPUs): {shown}"]
    notes = [(r.name, n) for r in results for n in r.notes]
    if notes:
        lines.append("")
        lines += [f"- {name}: {text}" for name, text in notes]
    return "\n".join(lines)
