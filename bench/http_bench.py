"""HTTP API figures, ratios in one run: submit-to-201 against an in-process ``sup.shell``,
SSE event latency (``ctx.progress`` in the unit -> the event at an httpx reader), and
submits/s, submit latency and SSE latency under the load test (50 SSE followers while
2,000 submits pour in); then the same figures for DBOS's HTTP path (``dbos_http_app.py``:
FastAPI over DBOS workflows on a SQLite system database, in its own process as
``workunits serve --http`` is).

    PYTHONPATH=src:. python bench/http_bench.py [--quick]

Loopback only. Temporal is not measured: its server is a binary download that
cannot be installed here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from tests.http.load import run
from tests.http.server import Served

import workunits as wu


def _ms(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    return {"p50_ms": 1000 * statistics.median(s), "p99_ms": 1000 * s[int(0.99 * (len(s) - 1))]}


def _sse_lags(api: httpx.Client, path: str, skip_first: bool) -> list[float]:
    """Latency of each progress event whose data (or message) is the time it was sent."""
    lags: list[float] = []
    event, first = "", True
    with api.stream("GET", path, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "progress":
                now = time.time()
                data = json.loads(line[5:])
                sent = data["message"] if isinstance(data, dict) else data
                if sent and not (skip_first and first):
                    lags.append(now - float(sent))
                first = False
            elif line.startswith("data:") and event == "end":
                break
    return lags


class DbosApp:
    """``dbos_http_app.py`` in its own process on a free loopback port."""

    def __init__(self, state: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("dbos_http_app.py")),
                str(port),
                f"sqlite:///{state / 'dbos.sqlite'}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":  # blocks until up or dead
            raise RuntimeError("the DBOS app did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def _dbos_load(url: str, followers: int, submits: int, lines: int) -> dict[str, Any]:
    """The load test's shape against DBOS: followers of one stamper while submits pour in."""
    limits = httpx.Limits(max_connections=followers + 20)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        wf = (await client.post("/stampers", params={"n": lines, "pause": 0.05})).json()["id"]
        lags: list[float] = []

        async def follow() -> bool:
            event = ""
            async with client.stream("GET", f"/workflows/{wf}/events") as r:
                async for line in r.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:") and event == "progress":
                        lags.append(time.time() - float(json.loads(line[5:])))
                    elif line.startswith("data:") and event == "end":
                        return True
            return False

        tasks = [asyncio.create_task(follow()) for _ in range(followers)]
        latencies: list[float] = []
        queue = list(range(submits))

        async def submitter() -> None:
            while queue:
                queue.pop()
                t = time.perf_counter()
                r = await client.post("/workflows")
                latencies.append(time.perf_counter() - t)
                assert r.status_code == 201, r.text

        started = time.perf_counter()
        await asyncio.gather(*(submitter() for _ in range(16)))
        elapsed = time.perf_counter() - started
        complete = sum(await asyncio.gather(*tasks))
    return {
        "followers": followers,
        "submits": submits,
        "submits_per_s": submits / elapsed,
        "submit_p50_ms": _ms(latencies)["p50_ms"],
        "submit_p99_ms": _ms(latencies)["p99_ms"],
        "complete_followers": complete,
        "sse_p50_ms": _ms(lags)["p50_ms"],
        "sse_p99_ms": _ms(lags)["p99_ms"],
    }


def _dbos(tmp: Path, n: int, followers: int, submits: int, lines: int) -> dict[str, Any]:
    app = DbosApp(tmp)
    try:
        with httpx.Client(base_url=app.url, timeout=30) as api:
            submit = []
            for _ in range(n):
                t = time.perf_counter()
                r = api.post("/workflows")
                submit.append(time.perf_counter() - t)
                assert r.status_code == 201
            wf = api.post("/stampers", params={"n": 100, "pause": 0.02}).json()["id"]
            lags = _sse_lags(api, f"/workflows/{wf}/events", skip_first=False)
        load = asyncio.run(_dbos_load(app.url, followers, submits, lines))
    finally:
        app.stop()
    return {"submit_http_201": _ms(submit), "sse_progress_latency": _ms(lags), "load": load}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 50 if args.quick else 300
    followers, submits = (10, 200) if args.quick else (50, 2000)
    lines = 60 if args.quick else 300  # the followed unit ticks (every 50 ms) through the load
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with wu.Supervisor(Path(tmp) / "local", install_signal_handlers=False) as sup:
            local = []
            for _ in range(n):
                t = time.perf_counter()
                sup.shell(["true"])
                local.append(time.perf_counter() - t)
        served = Served(Path(tmp) / "http")
        try:
            with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
                remote = []
                for _ in range(n):
                    t = time.perf_counter()
                    r = api.post("/v1/units", json={"kind": "shell", "argv": ["true"]})
                    remote.append(time.perf_counter() - t)
                    assert r.status_code == 201
                unit = api.post(
                    "/v1/units",
                    json={
                        "kind": "agent",
                        "target": "tests.http.units:stamper",
                        "args": [100, 0.02],
                    },
                ).json()
                lags = _sse_lags(api, f"/v1/units/{unit['id']}/events", skip_first=True)
            figures, _, _ = asyncio.run(
                run(served.url, served.token, followers, submits, lines=lines)
            )
        finally:
            served.stop()
        dbos = _dbos(Path(tmp), n, followers, submits, lines)
    out["submit_in_process"] = _ms(local)
    out["submit_http_201"] = _ms(remote)
    out["submit_ratio_p50"] = out["submit_http_201"]["p50_ms"] / out["submit_in_process"]["p50_ms"]  # type: ignore[index]
    out["sse_progress_latency"] = _ms(lags)
    out["load"] = figures.__dict__
    out["dbos_http"] = dbos
    out["ratios_workunits_over_dbos"] = {
        "submit_201_p50": out["submit_http_201"]["p50_ms"] / dbos["submit_http_201"]["p50_ms"],  # type: ignore[index]
        "sse_p50": out["sse_progress_latency"]["p50_ms"] / dbos["sse_progress_latency"]["p50_ms"],  # type: ignore[index]
        "load_submits_per_s": figures.submits_per_s / dbos["load"]["submits_per_s"],
        "load_sse_p50": figures.sse_p50_ms / dbos["load"]["sse_p50_ms"],
    }
    out["temporal"] = "not installable here: its server is a binary download"
    text = json.dumps(out, indent=2, default=str)
    print(text)
    Path(__file__).with_name("http_results.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
