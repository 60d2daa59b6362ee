"""What confining units costs: the same unit with the default protection, with
``Sandbox.workspace(tmp)``, and with ``isolation="off"``, alternately, in one run.

Three supervisors run side by side; each pair alternates a confined unit with
the same unit on the supervisor that confines nothing, so a shared machine's
drift cancels. The figure DESIGN §8 names is the default protection's added
time per unit (aim: ≤ 0.3 ms), for a shell and for an agent; the workspace
policy's is reported beside it (it builds a Landlock ruleset of its own, and
a private temp dir, per unit; its agent cannot use a warm spare).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import harness
from harness import BenchResult
from peer_benches import EVICT_SOON, HasQuick, pair_of, scale, state_dir, trivial

import workunits as wu

TARGET = 0.3e-3  # seconds added per unit by the default protection (DESIGN §8)


def _shell(sup: wu.Supervisor, sandbox: wu.Sandbox | None, bad: list[str]) -> Callable[[], float]:
    def unit() -> float:
        start = time.perf_counter()
        record = sup.wait(sup.shell(["true"], sandbox=sandbox).id, timeout=60)
        elapsed = time.perf_counter() - start
        if record.status is not wu.Status.COMPLETED:
            bad.append(f"{record.id}: {record.describe_end()}")
        return elapsed

    return unit


def _agent(sup: wu.Supervisor, sandbox: wu.Sandbox | None, bad: list[str]) -> Callable[[], float]:
    def unit() -> float:
        start = time.perf_counter()
        value = sup.result(sup.agent(trivial, 1, sandbox=sandbox).id, timeout=60)
        elapsed = time.perf_counter() - start
        if value != 2:
            bad.append(f"an agent returned {value!r}")
        return elapsed

    return unit


def _supervisors(stack: ExitStack) -> Iterator[wu.Supervisor]:
    for isolation in ("default", "off"):
        state = stack.enter_context(state_dir(f"isolation-{isolation}"))
        yield stack.enter_context(
            wu.Supervisor(state, eviction_grace=EVICT_SOON, isolation=isolation)
        )


def bench_isolation(cfg: HasQuick) -> BenchResult:
    """Shell and agent units: default protection and a workspace vs isolation="off"."""
    result = BenchResult("isolation")
    reps = scale(cfg, 80, 400)
    warm = scale(cfg, 10, 30)
    bad: list[str] = []
    with ExitStack() as stack:
        confined, off = _supervisors(stack)
        workspace = wu.Sandbox.workspace(Path(tempfile.mkdtemp(prefix="workunits-bench-ws-")))
        for kind, make in (("shell", _shell), ("agent", _agent)):
            plain = make(off, None, bad)
            for name, policy in (("default", None), ("workspace", workspace)):
                label = f"{kind}, {name}"
                pair = pair_of(
                    result,
                    f"{kind}: {name} protection vs isolation='off'",
                    (f"{label} protection", []),
                    (f"{kind}, isolation='off' [vs {name}]", []),
                )
                pair.a.samples, pair.b.samples = harness.alternate(
                    make(confined, policy, bad), plain, reps, warm
                )
                added = pair.a.median - pair.b.median
                result.info[f"{kind}_{name}_added_ms"] = added * 1000
                shown = (
                    f"{added * 1000:+.3f} ms ({pair.median_pair_ratio:.3f}x; "
                    f"{harness.fmt(pair.a.median, 's')} vs {harness.fmt(pair.b.median, 's')})"
                )
                if name == "default":
                    result.check(
                        f"{kind}: time the default protection adds per unit",
                        "<= 0.30 ms",
                        TARGET,
                        added,
                        shown,
                    )
                else:
                    result.note(f"{kind} under Sandbox.workspace(tmp): {shown} per unit")
    if bad:
        result.error = f"{len(bad)} units did not complete: {bad[:3]}"
    return result


BENCHES = {"isolation": bench_isolation}
