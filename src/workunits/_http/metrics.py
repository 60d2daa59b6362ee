"""``GET /metrics``: Prometheus text, from one registry kept for the server's life.

Nothing in it grows without a scrape: every series has a fixed set of labels
and buckets. Submit latency is observed into a histogram as each submit
returns (it is one fully synced ledger commit: the commit latency a client
sees); ledger commits are taken from the ledger's bounded record of its last
commits at each scrape; units by kind and status and the notices waiting are
read when asked for, from counts the ledger keeps (a few rows, whatever it
holds). Each request is counted by method, route *template* (never a unit's
ID) and status, and timed by method and route (``RequestMetrics``, an ASGI
middleware in front of the app). ``process_*`` are prometheus-client's own
(CPU, memory, open files of this process).

The collectors run in a worker thread at a scrape (``generate_latest``), so
their ledger reads never block the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import Match

from workunits._http import problems
from workunits._http.backend import Backend
from workunits._http.security import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
UNMATCHED = "(unmatched)"  # a path no route serves: one label for all of them


class _Counts(Collector):
    """Units by kind and status, ends, submits and notices waiting: read at each scrape."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def collect(self) -> Iterator[Metric]:
        units = GaugeMetricFamily(
            "workunits_units", "Units known, by kind and status", labels=["kind", "status"]
        )
        for (kind, status), n in sorted(self._backend.unit_counts_now().items()):
            units.add_metric([kind, status], n)
        yield units
        yield GaugeMetricFamily(
            "workunits_notices_waiting",
            "Notices not yet acknowledged",
            value=self._backend.notices_waiting_now(),
        )
        ends = CounterMetricFamily(
            "workunits_ends", "Units that reached a terminal status", labels=["status"]
        )
        for status, n in sorted(self._backend.ended_counts().items()):
            ends.add_metric([status], n)
        yield ends


class Metrics:
    """The server's registry and the series the app and its middleware feed."""

    def __init__(self, backend: Backend) -> None:
        self.registry = CollectorRegistry()
        self.submit_seconds = Histogram(
            "workunits_http_submit_seconds",
            "Submit latency over HTTP (each a fully synced ledger commit)",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.commit_seconds = Histogram(
            "workunits_ledger_commit_seconds",
            "How long each ledger write's COMMIT took (the fsync, when synced)",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "workunits_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "workunits_http_requests_in_flight",
            "HTTP requests being answered now (long-polls and event streams too)",
            ["route"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "workunits_http_request_seconds",
            "Time to answer an HTTP request (an event stream: its whole life)",
            ["method", "route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.submits = Counter(
            "workunits_http_submits", "Units submitted over HTTP", registry=self.registry
        )
        ProcessCollector(registry=self.registry)
        self.registry.register(_Counts(backend))
        self._backend = backend
        backend.on_submit = self._submitted

    def _submitted(self, seconds: float) -> None:
        self.submits.inc()
        self.submit_seconds.observe(seconds)

    def scrape(self) -> bytes:
        """The text of a scrape (a worker thread: collectors read the ledger)."""
        for seconds in self._backend.ledger_commit_seconds():
            self.commit_seconds.observe(seconds)
        return generate_latest(self.registry)


def router(metrics: Metrics) -> APIRouter:
    r = APIRouter(tags=["service"])

    @r.get("/metrics", response_class=Response)
    async def scrape() -> Response:
        """Units by kind and status, notices waiting, submits, ends, commit latency,
        requests by route, and the process's CPU, memory and open files."""
        text = await asyncio.to_thread(metrics.scrape)
        return Response(text, media_type="text/plain; version=0.0.4")

    return r


class RequestMetrics:
    """ASGI middleware: count and time each request by its route's template."""

    def __init__(self, app: ASGIApp, fastapi: FastAPI, metrics: Metrics, backend: Backend) -> None:
        self.app = app
        self._fastapi = fastapi
        self._metrics = metrics
        self._backend = backend

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self._backend.attach()
        started = time.perf_counter()
        status = [500]
        flying = self._metrics.in_flight.labels(self._route(scope))
        flying.inc()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            flying.dec()
            method = scope["method"] if scope["method"] in METHODS else "other"
            route = self._route(scope)
            self._metrics.requests.labels(method, route, str(status[0])).inc()
            self._metrics.request_seconds.labels(method, route).observe(
                time.perf_counter() - started
            )

    def _route(self, scope: Scope) -> str:
        """The template of the route that served (or would serve) the request's path."""
        found: Any = scope.get("route")
        if found is None:  # refused before routing (no token, a bad Host): match it here
            probe = {**scope, "method": "GET"}
            found = next(
                (
                    r
                    for r in problems.routes(self._fastapi)
                    if r.matches(probe)[0] is not Match.NONE
                ),
                None,
            )
        return str(getattr(found, "path", UNMATCHED) or UNMATCHED)
