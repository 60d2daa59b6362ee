"""HTTP API figures, ratios in one run: submit-to-201 against an in-process ``sup.shell``,
SSE event latency (``ctx.progress`` in the unit -> the event at an httpx reader), and
submits/s and submit latency under the load test (50 SSE followers, 2,000 submits).

    PYTHONPATH=src:. python bench/http_bench.py [--quick]

Loopback only. DBOS's HTTP path and Temporal are not measured: Temporal's server
cannot be installed here, and the DBOS comparison was not written in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from tests.http.load import run
from tests.http.server import Served

import workunits as wu


def _ms(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    return {"p50_ms": 1000 * statistics.median(s), "p99_ms": 1000 * s[int(0.99 * (len(s) - 1))]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 50 if args.quick else 300
    followers, submits = (10, 200) if args.quick else (50, 2000)
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
                lags = []
                with api.stream("GET", f"/v1/units/{unit['id']}/events", timeout=60) as r:
                    event = ""
                    for line in r.iter_lines():
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:") and event == "progress":
                            message = json.loads(line[5:])["message"]
                            if message:
                                lags.append(time.time() - float(message))
                        elif line.startswith("data:") and event == "end":
                            break
            figures, _, _ = asyncio.run(run(served.url, served.token, followers, submits))
        finally:
            served.stop()
    out["submit_in_process"] = _ms(local)
    out["submit_http_201"] = _ms(remote)
    out["submit_ratio_p50"] = out["submit_http_201"]["p50_ms"] / out["submit_in_process"]["p50_ms"]  # type: ignore[index]
    out["sse_progress_latency"] = _ms(lags)
    out["load"] = figures.__dict__
    out["dbos_http"] = "not measured (see the docstring)"
    out["temporal"] = "not installable here: its server is a binary download"
    text = json.dumps(out, indent=2, default=str)
    print(text)
    Path(__file__).with_name("http_results.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
