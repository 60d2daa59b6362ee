"""Running the HTTP API beside a supervisor: uvicorn on a thread of its own.

``workunits serve --http HOST:PORT`` starts it after the supervisor and stops
it before closing the supervisor. uvicorn runs its own event loop on one
thread (it installs no signal handlers off the main thread: ``serve`` keeps
those). The bound URL is written to ``http.url`` in the state dir (0600), for
``workunits ui`` and for callers that bound port 0.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from pathlib import Path

import uvicorn

from workunits._core.errors import SpecError, SupervisorClosed
from workunits._http.app import create_app
from workunits._http.backend import Backend
from workunits._http.protocol import Limits
from workunits._http.security import WILDCARDS, load_or_create_token
from workunits.supervisor.facade import Supervisor

log = logging.getLogger(__name__)

URL_FILE = "http.url"
START_TIMEOUT = 30.0


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``PORT`` (then 127.0.0.1)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SpecError(f"--http takes HOST:PORT or PORT (0-65535), got {text!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpServer:
    """The API for one supervisor, on ``host:port``; ``url`` once ``start()`` returned."""

    def __init__(
        self,
        sup: Supervisor,
        host: str,
        port: int,
        *,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        insecure: bool = False,
        token: str | None = None,
        advertise: str | None = None,
        limits: Limits | None = None,
    ) -> None:
        """``token``: the shared secret file's (``secretfile``); else the state dir's own.
        ``advertise``: the URL other hosts reach this server at; its host is accepted.
        ``limits``: read timeouts and connections per client (``protocol``)."""
        if (tls_cert is None) != (tls_key is None):
            raise SpecError("--tls-cert and --tls-key go together")
        tls = tls_cert is not None
        if not is_loopback(host) and not tls and not insecure:
            raise SpecError(
                f"refusing to serve HTTP on {host}, which is not a loopback address, without "
                "TLS: give --tls-cert and --tls-key, or --insecure if the network is trusted"
            )
        self._state_dir = Path(sup.state_dir)
        if token is None:
            token = load_or_create_token(self._state_dir)
        self.backend = Backend(sup)
        self.app, self.guard = create_app(self.backend, token, tls=tls)
        self.limits = limits or Limits()
        config = uvicorn.Config(
            self.guard,
            http=self.limits.protocol(),
            host=host,
            port=port,
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._host = host
        self._advertise = advertise
        self._scheme = "https" if tls else "http"
        self._thread = threading.Thread(target=self._server.run, name="workunits-http")
        self.url = ""
        self.warning: str | None = None  # said once started (a wildcard bind)

    def start(self) -> str:
        self._thread.start()
        started = threading.Event()

        def check() -> bool:
            return self._server.started or not self._thread.is_alive()

        deadline = START_TIMEOUT
        while not check() and deadline > 0:
            started.wait(0.01)
            deadline -= 0.01
        if not self._server.started:
            raise SupervisorClosed(f"the HTTP server did not start on {self._host}")
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.guard.allow(self._host, port)
        if self._advertise is not None:
            self.guard.allow_url(self._advertise)
        self.warning = None
        shown_host = self._host
        if self._host in WILDCARDS:
            # Every address of the machine, so no one address to advertise: this
            # host's own loopback one serves `workunits ui`, and others are told.
            shown_host = "::1" if ":" in self._host else "127.0.0.1"
            self.warning = (
                f"listening on every address of this machine ({self._host}, port {port}): "
                f"anyone who can reach it and has the token can run commands here. "
                f"Bind one address instead, or give --advertise URL for the name others use"
            )
        shown = f"[{shown_host}]" if ":" in shown_host else shown_host
        self.url = f"{self._scheme}://{shown}:{port}"
        path = self._state_dir / URL_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.url + "\n")
        return self.url

    def stop(self) -> None:
        """Answer every request from now on 503 + Retry-After, end the long-polls in flight
        the same way, then stop (uvicorn waits up to 2 s for the responses in flight)."""
        self.guard.closing = True
        self.backend.close()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        (self._state_dir / URL_FILE).unlink(missing_ok=True)
