"""``GET /metrics``: Prometheus text, built per scrape from the supervisor's own answers.

A fresh registry per scrape: the figures are read (off the event loop) when
asked for, so nothing is kept in step with the supervisor between scrapes.
Submit latency is measured by the backend around each submit, which is one
fully synced ledger commit: it is the ledger commit latency a client sees.
"""

from __future__ import annotations

from collections import Counter

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from workunits._http.backend import Backend

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _Ends(Collector):
    def __init__(self, ended: dict[str, int], submits: int) -> None:
        self._ended = ended
        self._submits = submits

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus-client's own signature
        ends = CounterMetricFamily(
            "workunits_ends", "Units that reached a terminal status", labels=["status"]
        )
        for status, n in sorted(self._ended.items()):
            ends.add_metric([status], n)
        yield ends
        yield CounterMetricFamily(
            "workunits_http_submits", "Units submitted over HTTP", value=self._submits
        )


def router(backend: Backend) -> APIRouter:
    r = APIRouter(tags=["service"])
    latency = Histogram(
        "workunits_http_submit_seconds",
        "Submit latency over HTTP (each a fully synced ledger commit)",
        buckets=BUCKETS,
        registry=None,
    )
    commits = Histogram(
        "workunits_ledger_commit_seconds",
        "How long each ledger write's COMMIT took (the fsync, when synced)",
        buckets=BUCKETS,
        registry=None,
    )
    submits = [0]

    @r.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """Units by kind and status, submits, ends, commit latency, notices waiting."""
        registry = CollectorRegistry()
        units = Gauge(
            "workunits_units",
            "Units known, by kind and status",
            ["kind", "status"],
            registry=registry,
        )
        counts = Counter((r.kind, r.shown_status) for r in await backend.all_records())
        for (kind, status), n in counts.items():
            units.labels(kind, status).set(n)
        waiting = Gauge(
            "workunits_notices_waiting", "Notices not yet acknowledged", registry=registry
        )
        waiting.set(await backend.notices_waiting())
        drained, backend.submit_seconds[:] = list(backend.submit_seconds), []
        for seconds in drained:
            latency.observe(seconds)
        submits[0] += len(drained)
        for seconds in backend.ledger_commit_seconds():
            commits.observe(seconds)
        registry.register(latency)
        registry.register(commits)
        registry.register(_Ends(backend.ended_counts(), submits[0]))
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    return r
