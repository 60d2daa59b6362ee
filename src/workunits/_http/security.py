"""The HTTP API's guard: bearer token, browser cookie, Host and Origin checks, body size.

- The token is ``http.token`` in the state dir, made at the first start (0600,
  ``O_EXCL``: never overwritten, never read through a symlink). Every path but
  ``/healthz`` needs it, as ``Authorization: Bearer`` or as the cookie the web
  view gets from ``/?token=...`` (HttpOnly, SameSite=Strict). Browsers send a
  host's cookies to all of its ports, so the cookie is named for the port
  (servers on one host keep their logins apart) and holds a value derived
  from the token, not the token: another port's server never sees a token.
- ``workunits ui --open`` hands the browser a one-time login code instead
  (``/?login=...``, valid ``LOGIN_LIFETIME`` seconds, an HMAC under the
  token), so the token is not on the browser's command line, where other
  local users could read it.
- ``Host`` must name the bound address (or localhost on a loopback bind): a DNS
  rebinding page reaches the port under a name of its own and is refused. A
  wildcard bind (``0.0.0.0``, ``::``) accepts the localhost names, the
  machine's host name, any of its own IP addresses, and the advertised URL's
  host (``serve --advertise``); any other name is still refused.
- A request that carries ``Origin`` must come from this server's origin; a
  state-changing request that authenticates with the cookie must carry it. A
  request that authenticates with the cookie must not be a cross-site or
  same-site one (``Sec-Fetch-Site``: another port of this host is the same
  site), and notices, which a GET claims, are never taken with the cookie.
- Bodies are limited to ``MAX_BODY`` bytes, and must say their length.
- Every response says it may not be framed (``frame-ancestors 'none'``,
  ``X-Frame-Options``: a page elsewhere cannot overlay the web view and take
  its clicks), may not be sniffed into another type, sends no referrer, and
  carries a Content-Security-Policy: the web view loads nothing but its own
  files. ``/docs`` and ``/redoc`` get a policy of their own, which lets in
  the CDN FastAPI loads Swagger UI and ReDoc from, and their inline script:
  those pages are a developer's convenience, and pinning a copy of Swagger UI
  in the wheel would be a large vendored bundle to keep up to date.

A pure ASGI middleware, so event streams pass through it unbuffered.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from workunits._core.errors import StateDirError

TOKEN_FILE = "http.token"  # noqa: S105 - a file name, not a secret
COOKIE = "workunits_token"
MAX_BODY = 1 << 20
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARDS = ("0.0.0.0", "::")  # noqa: S104 - names of a wildcard bind, to recognise one

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
CDN = "https://cdn.jsdelivr.net"
DOCS_CSP = (
    f"default-src 'none'; script-src 'unsafe-inline' {CDN}; "
    f"style-src 'unsafe-inline' {CDN} https://fonts.googleapis.com; "
    "font-src https://fonts.gstatic.com; img-src 'self' data: https:; connect-src 'self'; "
    "worker-src blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DOCS_PATHS = frozenset({"/docs", "/redoc", "/docs/oauth2-redirect"})
HEALTH = "/healthz"
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)

RETRY_AFTER = (b"retry-after", b"5")
"""What a 503 says: how long before a client tries again (a restart, a busy ledger)."""

LOGIN_LIFETIME = 60
"""Seconds a login code from ``login_code`` may be exchanged for the cookie, once."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def load_or_create_token(state_dir: Path) -> str:
    """The state dir's token, created (0600) at the first call."""
    path = state_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return read_token(state_dir)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def read_token(state_dir: Path) -> str:
    path = state_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise StateDirError(
            f"cannot read {path}: {exc.strerror}; has `workunits serve --http` run?"
        ) from None
    with os.fdopen(fd) as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise StateDirError(
                f"{path} is readable by others: chmod 600 it, or delete it for a new one"
            )
        token = f.read().strip()
    if not token:
        raise StateDirError(f"{path} is empty: delete it and restart for a new token")
    return token


def login_code(token: str) -> str:
    """A one-time code that logs a browser in within ``LOGIN_LIFETIME`` seconds."""
    expiry = int(time.time()) + LOGIN_LIFETIME
    nonce = secrets.token_urlsafe(12)
    return f"{expiry}.{nonce}.{_login_mac(token.encode(), expiry, nonce)}"


def _login_mac(token: bytes, expiry: int, nonce: str) -> str:
    return hmac.new(token, f"workunits login {expiry} {nonce}".encode(), "sha256").hexdigest()


def token_id(token: str) -> str:
    """A short public name for a token: the owner of its claims and leases is ``http:<id>``."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


class Guard:
    """ASGI middleware in front of the app; ``hosts`` is filled once the port is bound."""

    def __init__(self, app: ASGIApp, *, token: str, tls: bool) -> None:
        self.app = app
        self._token = token.encode()
        self._tls = tls
        self.hosts: set[str] = set()
        self._cookie = COOKIE  # named for the port once it is known (allow)
        self._cookie_value = hmac.new(self._token, b"workunits web view", "sha256").hexdigest()
        # A wildcard bind's port: a Host that is one of this machine's IP addresses
        # with it is accepted (an address literal cannot be a rebinding page's name).
        self._any_address_port: int | None = None
        self._local: dict[str, bool] = {}  # IP literal -> whether it is this machine's
        self._used: dict[str, int] = {}  # login code nonce -> its expiry: used once
        # Set (from the thread that stops the server) once it is shutting down: every
        # request from then on is answered 503 with Retry-After, never served half.
        self.closing = False

    def allow(self, host: str, port: int) -> None:
        """Accept ``Host: host:port`` (and localhost names for a loopback bind; for a
        wildcard bind, those, the machine's names and its own addresses too)."""
        names = {host if ":" not in host else f"[{host}]"}
        if host in ("127.0.0.1", "::1", "localhost", *WILDCARDS):
            names.update(LOOPBACK_NAMES)
        self._cookie = f"{COOKIE}_{port}"
        if host in WILDCARDS:
            self._any_address_port = port
            names.update({socket.gethostname(), socket.getfqdn()})
        for name in names:
            self._add(name.lower(), port)

    def allow_url(self, url: str) -> None:
        """Also accept the host of ``url``, the address this server is advertised at."""
        parts = urlsplit(url)
        if parts.hostname:
            name = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
            https = parts.scheme == "https"
            self._add(name.lower(), parts.port or (443 if https else 80))

    def _add(self, name: str, port: int) -> None:
        self.hosts.add(f"{name}:{port}")
        if port == (443 if self._tls else 80):
            self.hosts.add(name)

    def _known_host(self, host: str) -> bool:
        host = host.lower()
        if host in self.hosts:
            return True
        if self._any_address_port is None:
            return False
        name, sep, port = host.rpartition(":")
        if not sep or "]" in port:  # no port: the scheme's default
            name, port = host, str(443 if self._tls else 80)
        if port != str(self._any_address_port):
            return False
        return self._is_local_address(name.removeprefix("[").removesuffix("]"))

    def _is_local_address(self, text: str) -> bool:
        known = self._local.get(text)
        if known is not None:
            return known
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return False
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        try:  # only an address of this machine can be bound
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((str(address), 0))
        except OSError:
            local = False
        else:
            local = True
        if len(self._local) < 1024:  # bounded: Host is the client's to choose
            self._local[text] = local
        return local

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_security_headers(send, DOCS_CSP if scope["path"] in DOCS_PATHS else CSP)
        if self.closing:
            detail = "the server is shutting down: retry in a moment (its next run answers)"
            await _send_problem(send, 503, "ShuttingDown", detail, [RETRY_AFTER])
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, title, detail, extra = refusal
            await _send_problem(send, status, title, detail, extra)
            return
        login = _login_exchange(scope)
        if login is not None:
            name, value = login
            if name == "token":
                await self._hand_cookie(send, value)
            else:
                await self._hand_cookie_for_code(send, value)
            return
        await self.app(scope, receive, send)

    def _refusal(
        self, scope: Scope, headers: dict[str, str]
    ) -> tuple[int, str, str, list[tuple[bytes, bytes]]] | None:
        host = headers.get("host", "")
        if not self._known_host(host):
            return 421, "MisdirectedRequest", f"Host {host!r} is not this server's name", []
        origin = headers.get("origin")
        scheme = "https" if self._tls else "http"
        if origin is not None and origin != f"{scheme}://{host}":
            return 403, "Forbidden", f"Origin {origin!r} may not use this API", []
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return 413, "PayloadTooLarge", f"request bodies are limited to {MAX_BODY} bytes", []
        if "transfer-encoding" in headers:
            return 411, "LengthRequired", "send a Content-Length with the body", []
        path = scope["path"]
        # Exact exemptions: the health check, and the one login exchange (which
        # checks what it is given itself). Nothing else, whatever its query says.
        if path == HEALTH or _login_exchange(scope) is not None:
            return None
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer " and hmac.compare_digest(
            auth[7:].strip().encode(), self._token
        ):
            return None
        cookie = SimpleCookie(headers.get("cookie", ""))
        morsel = cookie.get(self._cookie)
        if morsel is not None and hmac.compare_digest(morsel.value, self._cookie_value):
            # The cookie is sent by every page of the same site (another port of this
            # host too): only this server's own page, or an address typed in, uses it.
            site = headers.get("sec-fetch-site", "same-origin")
            if site not in ("same-origin", "none"):
                return 403, "Forbidden", f"a {site} request may not use the login cookie", []
            if path.startswith("/v1/notifications"):
                # GET claims a notice: a page's <img> would, without Fetch Metadata.
                return (
                    403,
                    "Forbidden",
                    "notices are claimed with Authorization: Bearer, not the login cookie",
                    [],
                )
            if scope["method"] not in SAFE_METHODS and origin is None:
                return (
                    403,
                    "Forbidden",
                    "a state-changing request from the browser needs Origin",
                    [],
                )
            return None
        hint = "send Authorization: Bearer <the state dir's http.token>, or open `workunits ui`"
        return 401, "Unauthorized", hint, [(b"www-authenticate", b"Bearer")]

    async def _hand_cookie_for_code(self, send: Send, code: str) -> None:
        if not self._redeem(code):
            detail = (
                "that login code is not this server's, was used already, or expired: "
                "run `workunits ui --open` again"
            )
            await _send_problem(send, 401, "Unauthorized", detail, [])
            return
        await self._send_cookie(send)

    def _redeem(self, code: str) -> bool:
        """Whether ``code`` is a live login code of this token, used now for the first time."""
        expiry_text, _, rest = code.partition(".")
        nonce, _, mac = rest.partition(".")
        now = int(time.time())
        if not expiry_text.isdigit() or not now <= int(expiry_text) <= now + LOGIN_LIFETIME:
            return False
        expected = _login_mac(self._token, int(expiry_text), nonce)
        if not hmac.compare_digest(mac, expected) or nonce in self._used:
            return False
        self._used = {n: e for n, e in self._used.items() if e >= now}  # only live ones
        self._used[nonce] = int(expiry_text)
        return True

    async def _hand_cookie(self, send: Send, offered: str) -> None:
        if not hmac.compare_digest(offered.encode(), self._token):
            await _send_problem(send, 401, "Unauthorized", "that token is not this server's", [])
            return
        await self._send_cookie(send)

    async def _send_cookie(self, send: Send) -> None:
        cookie = f"{self._cookie}={self._cookie_value}; HttpOnly; SameSite=Strict; Path=/"
        if self._tls:
            cookie += "; Secure"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", b"/"),
                    (b"set-cookie", cookie.encode()),
                    (b"cache-control", b"no-store"),
                    (b"content-length", b"0"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _login_exchange(scope: Scope) -> tuple[str, str] | None:
    """``("token", value)`` or ``("login", code)`` for ``/?token=...`` or ``/?login=...``
    (a blank value too: it is refused as wrong, not served the page); else None."""
    if scope["path"] != "/" or not scope.get("query_string"):
        return None
    query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    for name in ("token", "login"):
        if name in query:
            return name, query[name][0]
    return None


def _with_security_headers(send: Send, policy: str) -> Send:
    """``send`` that adds the security headers to the response's start."""
    extra = [*SECURITY_HEADERS, (b"content-security-policy", policy.encode())]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return sending


async def _send_problem(
    send: Send, status: int, title: str, detail: str, extra: list[tuple[bytes, bytes]]
) -> None:
    body = orjson.dumps(
        {"type": f"urn:workunits:error:{title}", "title": title, "status": status, "detail": detail}
    )
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
