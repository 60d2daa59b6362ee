"""Live output of a unit running on another host, read through its supervisor's HTTP API.

Output stays on the disk of the host that runs the unit (DESIGN §4); only an
ended unit's tail is in the ledger. A client on another host of a shared
PostgreSQL ledger finds the running unit's session row, and in it the URL
that session's ``workunits serve --http`` advertised (``--advertise``), and
reads ``GET /v1/units/{id}/output?offset=N`` there with the shared secret
file's token (``_ledger.secretfile``). Plain ``urllib``: no extra needed.

Which way: the unit's file is read here when it is here (the client shares
the supervisor's state dir). Otherwise it is read through the URL its session
advertised; a unit whose process has started (its pid is in the ledger) with
no file here and no URL is a clear error rather than a wait for output that
never comes.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

from workunits._core import ids
from workunits._core.errors import LedgerError
from workunits._core.status import is_terminal
from workunits._ledger import Ledger, UnitRow

TIMEOUT = 10.0  # seconds for one read from another host


class OtherHostOutput:
    """Reads from other hosts' supervisors for one client; runs in the caller's thread."""

    def __init__(self, ledger: Ledger, token: str | None) -> None:
        self._ledger = ledger
        self._token = token
        # session -> its advertised URL; a miss is looked up again (serve advertises
        # once its HTTP server is up, just after the session opened).
        self._urls: dict[str, str] = {}

    def url_for(self, row: UnitRow) -> str | None:
        """Where to read running ``row``'s output, whose file is not on this host.

        Its session's advertised URL; None to wait for the file here, or for the
        end's tail in the ledger. LedgerError when it runs elsewhere and cannot be
        read: no URL advertised, or no token to read it with.

        None, whatever the session advertised, on a ledger of one host (SQLite:
        every unit runs beside its state dir), for a unit whose process has not
        started (its file is yet to appear), and for one that ended since ``row``
        was read (its file is removed at the end, just before the ledger says so).
        """
        if row.pid is None or not self._ledger.shared:
            return None
        now = self._ledger.units.get(row.id)
        if now is None or is_terminal(now.status):
            return None
        url = self._url_of(row)
        if url is None:
            raise LedgerError(
                f"{row.id} runs on another host (session {row.session}: its output file is "
                f"not here), and its supervisor advertised no URL to read live output from: "
                f"run that host's `workunits serve` with --http (and --advertise URL when "
                f"other hosts reach it by another address). Its tail is in the ledger once "
                f"it ends"
            )
        if self._token is None:
            raise LedgerError(
                f"{row.id} runs under session {row.session}, whose output is read at {url}; "
                f"that needs the hosts' shared secret file: give secret_file= (or set "
                f"WORKUNITS_SECRET_FILE)"
            )
        return url

    def _url_of(self, row: UnitRow) -> str | None:
        if row.session is None:
            return None
        url = self._urls.get(row.session)
        if url is None:
            session = self._ledger.sessions.get(row.session)
            if session is not None and session.url is not None:
                url = self._urls[row.session] = session.url
        return url

    def read(self, url: str, work_id: str, offset: int, limit: int) -> bytes:
        """Bytes of ``work_id``'s output from ``offset`` (at most ``limit``), from ``url``."""
        target = f"{url}/v1/units/{ids.validate(work_id)}/output?offset={offset}&limit={limit}"
        request = urllib.request.Request(  # noqa: S310 - an http(s) URL, checked when advertised
            target, headers={"Authorization": f"Bearer {self._token}"}
        )
        context = ssl.create_default_context() if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as answer:  # noqa: S310
                data: bytes = answer.read()
        except urllib.error.HTTPError as exc:
            hint = " (is every host given the same secret file?)" if exc.code == 401 else ""
            raise LedgerError(
                f"reading {work_id}'s output from {url} failed: HTTP {exc.code} {exc.reason}{hint}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise LedgerError(
                f"cannot reach {url}, where {work_id}'s live output is read: {reason}; check "
                f"that its `workunits serve` runs and --advertise names an address this host "
                f"reaches"
            ) from None
        return data
