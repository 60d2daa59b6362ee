"""Remote units against bare Ray, in one run (DESIGN section 8, the remote kind).

    python bench/remote_bench.py [--quick]

Needs ``workunits[ray]``. Starts one local Ray (``num_cpus=2``, dashboard off,
files in a temporary directory) and one supervisor on it, then measures, each
pair alternating (unit, bare, unit, bare, ...) so that drift on a shared
machine hits both sides alike:

- submit -> result of a remote unit against ``ray.get(f.remote())`` of a bare
  Ray task running the same function, for a trivial body and a 10 ms one
  (target: the unit within 1.5x of the bare task);
- kill -> terminal record of a running remote unit against
  ``ray.cancel(force=True)`` -> error seen for a running bare task;
- the empty body's floor, pair by pair: a fully synced commit, a Ray
  streaming-generator task that yields one item (the shape a unit takes on Ray
  so that its output can stream), read to its end, and a fully synced commit,
  timed as one. A target below it cannot be reached on this machine.

Prints a Markdown table. Exit status 0; 2 when Ray is not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import harness
import peer_benches
from harness import BenchResult, Pair, Series

import workunits as wu

RATIO_TARGET = 1.5


def spin(ms: float) -> int:
    """The work both sides do: ``ms`` milliseconds of CPU, then a small value."""
    end = time.perf_counter() + ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n & 0xFF


def one_item(ms: float) -> Iterator[int]:
    """The floor's task: a streaming generator that yields one item, as a unit's does."""
    yield spin(ms)


def hang(started: str) -> None:
    """Say it runs (a file appears), then run until killed."""
    Path(started).touch()
    threading.Event().wait()


def wait_for(path: Path, timeout: float = 60.0) -> None:
    """Both sides start the same way; the bench waits for the body's sign of life."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    delay = 0.0005
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path.name} did not appear within {timeout} s")
        pause.wait(delay)
        delay = min(delay * 2, 0.01)


def bench_overhead(
    sup: wu.Supervisor,
    ray: Any,
    ms: float,
    reps: int,
    warmup: int,
    *,
    floor_in: Path | None = None,
) -> BenchResult:
    """Submit -> result against a bare task; ``floor_in`` (a directory for its SQLite
    file): the durable floor too, pair by pair."""
    result = BenchResult(f"remote_{ms:g}ms")
    bare_spin = ray.remote(spin)

    def unit() -> float:
        start = time.perf_counter()
        sup.result(sup.remote(spin, ms).id, timeout=60)
        return time.perf_counter() - start

    def bare() -> float:
        start = time.perf_counter()
        ray.get(bare_spin.remote(ms), timeout=60)
        return time.perf_counter() - start

    a, b = harness.alternate(unit, bare, reps, warmup)
    pair = Pair(
        "submit -> result",
        Series(f"remote unit, {ms:g} ms body", a),
        Series(f"bare Ray task, {ms:g} ms body", b),
    )
    result.pairs.append(pair)
    result.series += [pair.a, pair.b]
    # The peer, no target: DESIGN §8 sets the remote unit's against its durable floor.
    result.note(
        f"remote unit / bare Ray task ({ms:g} ms body): {pair.median_pair_ratio:.2f}x "
        f"({harness.fmt(pair.a.median, 's')} vs {harness.fmt(pair.b.median, 's')})"
    )
    if floor_in is not None:
        streamed = ray.remote(num_returns="streaming", max_retries=0)(one_item)
        work = "a Ray streaming-generator task yielding one item, read to its end"

        def stream() -> None:
            for ref in streamed.remote(ms):
                ray.get(ref, timeout=60)

        durable = peer_benches.durable_pair(
            result,
            floor_in,
            (f"remote unit, {ms:g} ms body", unit),
            (work, stream),
            reps=reps,
            warm=warmup,
        )
        result.check(
            f"remote unit ({ms:g} ms body) / its durable floor, median of pair ratios",
            f"<= {RATIO_TARGET}x",
            RATIO_TARGET,
            durable.median_pair_ratio,
            f"{durable.median_pair_ratio:.2f}x ({harness.fmt(durable.a.median, 's')} vs "
            f"{harness.fmt(durable.b.median, 's')})",
        )
        result.note(
            peer_benches.durable_floor_note(durable, work, ("the bare task", pair.b.median))
        )
    return result


def bench_kill(sup: wu.Supervisor, ray: Any, scratch: Path, reps: int, warmup: int) -> BenchResult:
    result = BenchResult("remote_kill")
    bare_hang = ray.remote(max_retries=0)(hang)
    counter = iter(range(1 << 30))
    bad: list[str] = []

    def sign() -> Path:
        return scratch / f"started-{next(counter)}"

    def unit() -> float:
        started = sign()
        handle = sup.remote(hang, str(started))
        wait_for(started)
        start = time.perf_counter()
        sup.kill(handle.id)
        record = sup.wait(handle.id, timeout=60)
        elapsed = time.perf_counter() - start
        if record.status is not wu.Status.KILLED:
            bad.append(f"{record.id}: {record.describe_end()}")
        return elapsed

    def bare() -> float:
        started = sign()
        ref = bare_hang.remote(str(started))
        wait_for(started)
        start = time.perf_counter()
        ray.cancel(ref, force=True)
        with contextlib.suppress(ray.exceptions.TaskCancelledError):
            ray.get(ref, timeout=60)
            bad.append("a bare task survived ray.cancel(force=True)")
        return time.perf_counter() - start

    a, b = harness.alternate(unit, bare, reps, warmup)
    pair = Pair(
        "kill -> terminal",
        Series("sup.kill -> terminal record (remote unit)", a),
        Series("ray.cancel(force=True) -> error seen (bare task)", b),
    )
    result.pairs.append(pair)
    result.series += [pair.a, pair.b]
    if bad:
        result.error = f"{len(bad)} kills went wrong: {bad[:3]}"
    result.note(
        f"kill -> terminal record: {harness.fmt(pair.a.median, 's')} for a remote unit, "
        f"{harness.fmt(pair.b.median, 's')} for a bare task ({pair.median_pair_ratio:.2f}x); "
        "each kill costs Ray a worker; its replacement starts outside the measured span"
    )
    return result


@contextlib.contextmanager
def local_ray(ray: Any, temp: Path) -> Iterator[None]:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=False,
        _temp_dir=str(temp),
    )
    try:
        yield
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    try:
        import ray  # noqa: PLC0415 - optional: this bench needs the [ray] extra
    except ImportError:
        print('Ray is not installed: pip install "workunits[ray]"', file=sys.stderr)
        return 2
    scale = 4 if args.quick else 1
    env = harness.environment(sys.argv)
    # Short paths: Ray's socket paths under its temp dir must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="wu-rb-") as tmp:
        scratch = Path(tmp)
        with (
            local_ray(ray, scratch / "ray"),
            wu.Supervisor(
                scratch / "state", install_signal_handlers=False, eviction_grace=1.0
            ) as sup,
        ):
            runs: list[Callable[[], BenchResult]] = [
                lambda: bench_overhead(sup, ray, 0, 200 // scale, 20, floor_in=scratch),
                lambda: bench_overhead(sup, ray, 10, 100 // scale, 10),
                lambda: bench_kill(sup, ray, scratch, 20 // scale, 2),
            ]
            results = []
            for run in runs:
                load_before = os.getloadavg()[0]
                started = time.perf_counter()
                result = run()
                result.seconds = time.perf_counter() - started
                result.info["loadavg_1min"] = (load_before, os.getloadavg()[0])
                results.append(result)
    print()
    print(
        f"Ray {ray.__version__}, Python {env['python']}, {env['cpus']} CPUs, commit {env['commit']}"
    )
    print()
    print(harness.markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
