"""A bounded load on a ``serve --http`` process: SSE followers while submits pour in.

Used by the CI-sized test (``test_load.py``) and by ``bench/http_bench.py``
(full size). Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx

LINES = 30


@dataclass
class LoadFigures:
    followers: int
    submits: int
    submits_per_s: float
    submit_p50_ms: float
    submit_p99_ms: float
    complete_followers: int
    sse_p50_ms: float
    """``ctx.progress`` in the followed unit -> the event at a follower, under the load."""
    sse_p99_ms: float


async def _follow(
    client: httpx.AsyncClient, work_id: str, lags: list[float]
) -> list[tuple[str, dict[str, Any]]]:
    """Every event until ``end``; ``lags`` gets each live progress event's latency."""
    events: list[tuple[str, dict[str, Any]]] = []
    event, data, event_id, snapshot = "message", "", "", None
    async with client.stream("GET", f"/v1/units/{work_id}/events", timeout=120) as r:
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif not line and data:
                now = time.time()
                events.append((event, json.loads(data)))
                snapshot = snapshot or event_id  # the first events: how it was, not news
                if event == "progress" and event_id != snapshot:
                    lags.append(now - float(events[-1][1]["message"]))
                if event == "end":
                    return events
                event, data = "message", ""
    return events


async def run(
    url: str, token: str, followers: int, submits: int, *, concurrency: int = 16, lines: int = LINES
) -> tuple[LoadFigures, list[list[tuple[str, dict[str, Any]]]], list[str]]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=followers + concurrency + 4)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=60
    ) as client:
        unit = (
            await client.post(
                "/v1/units",
                json={
                    "kind": "agent",
                    "target": "tests.http.units:ticker",
                    "args": [lines, 0.05, True],
                },
            )
        ).json()
        lags: list[float] = []
        follow = [asyncio.create_task(_follow(client, unit["id"], lags)) for _ in range(followers)]
        latencies: list[float] = []
        ids: list[str] = []
        queue = list(range(submits))

        async def submitter() -> None:
            while queue:
                queue.pop()
                started = time.perf_counter()
                r = await client.post("/v1/units", json={"kind": "shell", "argv": ["true"]})
                latencies.append(time.perf_counter() - started)
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])

        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(submitter() for _ in range(concurrency))), 600)
        elapsed = time.perf_counter() - started
        streams = await asyncio.wait_for(asyncio.gather(*follow), 600)
    lat = sorted(latencies)
    figures = LoadFigures(
        followers=followers,
        submits=submits,
        submits_per_s=submits / elapsed,
        submit_p50_ms=1000 * statistics.median(lat),
        submit_p99_ms=1000 * lat[int(0.99 * (len(lat) - 1))],
        complete_followers=sum(1 for s in streams if s and s[-1][0] == "end"),
        sse_p50_ms=1000 * statistics.median(lags) if lags else float("nan"),
        sse_p99_ms=1000 * sorted(lags)[int(0.99 * (len(lags) - 1))] if lags else float("nan"),
    )
    return figures, streams, ids
