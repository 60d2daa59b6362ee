"""The fleet an MCP server drives: its own supervisor, or a client of a running one.

``workunits mcp`` runs a ``Supervisor`` on a state dir, or attaches to a
running ``serve`` through ``wu.connect(STATE_DIR)`` (the ledger) or
``wu.connect(URL, token=...)`` (the HTTP API). The three answer the same
calls with the same records and errors, except for reading output from an
offset, which each does its own way: :class:`Fleet` gives the tools one
surface over them. Every method blocks; the tools call them in worker
threads (``anyio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from workunits._core.claim import NoticeSource
from workunits._core.record import MailboxItem, Notification, OutputChunk, WorkRecord

if TYPE_CHECKING:
    from workunits._client.http_client import HttpClient
    from workunits._client.ledger_client import Client
    from workunits.supervisor.facade import Supervisor


class _Handle(Protocol):
    id: str


class Fleet:
    """One surface over a ``Supervisor``, a ledger ``Client`` or an ``HttpClient``.

    ``where`` says which, for the logs and the tools' answers. Thread-safe as
    the backend is (all three are).
    """

    def __init__(self, backend: Supervisor | Client | HttpClient, where: str) -> None:
        self.backend = backend
        self.where = where

    @property
    def carries_sandbox(self) -> bool:
        """Whether the backend's submits take ``sandbox=`` (a Supervisor's do; a
        client's once its submit options carry it)."""
        return "sandbox" in inspect.signature(self.backend.shell).parameters

    # -- starting ------------------------------------------------------------------

    def shell(
        self,
        command: str,
        *,
        cwd: str,
        timeout: float | None,
        description: str | None,
        key: str | None,
        extra: dict[str, Any],
    ) -> str:
        """Start ``command`` under ``/bin/sh -c``; its output is kept until it expires,
        so it can be read (and searched) after the end too."""
        handle: _Handle = self.backend.shell(
            command,
            cwd=cwd,
            timeout=timeout,
            description=description,
            key=key,
            keep_output=True,
            **extra,
        )
        return handle.id

    def agent(
        self,
        target: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        timeout: float | None,
        description: str | None,
        key: str | None,
        extra: dict[str, Any],
    ) -> str:
        """Start the importable ``module:qualname`` with JSON arguments."""
        handle: _Handle = self.backend.agent(
            target,
            *args,
            timeout=timeout,
            description=description,
            key=key,
            **extra,
            **kwargs,
        )
        return handle.id

    def retry(self, work_id: str) -> str:
        return self.backend.retry(work_id).id

    # -- reading -------------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        return self.backend.get(work_id)

    def list(
        self, status: str | None = None, kind: str | None = None, parent: str | None = None
    ) -> list[WorkRecord]:
        """Every unit matching the filters, oldest first."""
        return self.backend.list(status=status, kind=kind, parent=parent)

    def read(self, work_id: str, offset: int, limit: int) -> OutputChunk:
        """Up to ``limit`` output bytes from ``offset``; the unit's own offset is left alone.

        ``chunk.start > offset`` when those bytes are no longer held (an ended
        unit whose output was not kept keeps only its last 64 KiB).
        """
        from workunits._client.ledger_client import Client  # noqa: PLC0415 - lazy: see module docstring
        from workunits.supervisor.facade import Supervisor  # noqa: PLC0415

        backend = self.backend
        if isinstance(backend, Supervisor):
            return backend.read_output(work_id, limit, offset=offset)
        if isinstance(backend, Client):
            return _read_through_ledger(backend, work_id, offset, limit)
        return _read_over_http(backend, work_id, offset, limit)

    # -- acting --------------------------------------------------------------------

    def kill(self, work_id: str) -> bool:
        return self.backend.kill(work_id)

    def cancel(self, work_id: str, grace: float) -> bool:
        return self.backend.cancel(work_id, grace)

    def signal(self, work_id: str, name: str, value: Any) -> bool:
        return self.backend.signal(work_id, name, value)

    def notices(self) -> NoticeSource[MailboxItem] | NoticeSource[Notification]:
        """The application's mailbox of top-level ends: one consumer for the whole server."""
        return self.backend.notifications()

    def close(self, *, deploy: bool) -> None:
        """Close the backend: a supervisor hands resumable work over when ``deploy``."""
        from workunits.supervisor.facade import Supervisor  # noqa: PLC0415

        if isinstance(self.backend, Supervisor):
            self.backend.close(deploy=deploy)
        else:
            self.backend.close()


def _read_through_ledger(client: Client, work_id: str, offset: int, limit: int) -> OutputChunk:
    """A one-look stream positioned at ``offset`` (the files and the ledger, no supervisor)."""
    record = client.get(work_id)
    start = offset
    stream = client.stream(work_id, follow=False)
    try:
        stream.offset = offset
        data = stream.look() or b""
        stream_offset = stream.offset
    finally:
        stream.close()
    if data and stream_offset - len(data) > offset:
        start = stream_offset - len(data)  # bytes before the stored tail are gone
    data = data[:limit]  # a stream reads in its own chunks
    next_offset = start + len(data)
    ended = _ended(record) and next_offset >= record.output_bytes
    return OutputChunk(data, start, next_offset, ended)


def _read_over_http(client: HttpClient, work_id: str, offset: int, limit: int) -> OutputChunk:
    response = client._read_output(work_id, offset, limit)
    data = response.content
    next_offset = int(response.headers.get("x-next-offset", offset + len(data)))
    start = next_offset - len(data)
    ended = response.headers.get("x-ended", "false") == "true"
    return OutputChunk(data, start, next_offset, ended)


def _ended(record: WorkRecord) -> bool:
    from workunits._core.status import is_terminal  # noqa: PLC0415 - tiny, kept beside its use

    return is_terminal(record.status)


def attach(target: str, *, token: str | None) -> Fleet:
    """A fleet of the running ``serve`` at ``target``: an http(s) URL or a state dir."""
    import workunits as wu  # noqa: PLC0415 - the public API, loaded on first use

    if target.startswith(("http://", "https://")):
        if token is None:
            raise wu.SpecError(
                f"--connect {target} needs that server's token: pass --token-file "
                "(the served state dir's http.token)"
            )
        return Fleet(wu.connect(target, token=token), target)
    return Fleet(wu.connect(target), target)


def own(state_dir: str, **options: Any) -> Fleet:
    """A fleet of this server's own supervisor on ``state_dir``."""
    import workunits as wu  # noqa: PLC0415

    sup = wu.Supervisor(state_dir=state_dir, **options)
    try:
        return Fleet(sup, str(sup.state_dir))
    except BaseException:
        with contextlib.suppress(Exception):
            sup.close()
        raise
