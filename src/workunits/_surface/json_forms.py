"""Submit options as the HTTP API takes them: what an option's ``Json(encode=)`` names.

The HTTP client (``_client/http_client.py``) sends each option it was given
as its JSON form; one with no ``encode`` is sent as it is. Each checks what
the server cannot (a callable, a local path), with the words the other
surfaces use.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

from workunits._core.errors import SpecError
from workunits._core.retry import Retry, check_retry
from workunits._core.sandbox import Sandbox, check_sandbox
from workunits._wire.submits import check_not_before


def not_before(value: float | datetime.datetime | None) -> str | None:
    """An ISO 8601 time with its offset (a naive datetime is local time, as elsewhere)."""
    at = check_not_before(value, time.time())
    return None if at is None else datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat()


def retry(policy: Retry | None) -> dict[str, Any] | None:
    if check_retry(policy) is None:
        return None
    assert policy is not None
    if tuple(policy.on) != (Exception,):
        raise SpecError(
            "over HTTP a Retry retries any exception (or exit_codes): its on= names Python "
            "types the server cannot take; drop on=, or submit with the Python API on the host"
        )
    return {
        "max_attempts": policy.max_attempts,
        "backoff": policy.backoff,
        "initial": policy.initial,
        "max_delay": policy.max_delay,
        "jitter": policy.jitter,
        "exit_codes": None if policy.exit_codes is None else list(policy.exit_codes),
    }


def path(value: Any) -> Any:
    """A path as text (anything else is sent as it is, for the server to refuse)."""
    return os.fspath(value) if isinstance(value, str | os.PathLike) else value


def absolute_path(value: Any) -> Any:
    """A path made absolute against this process's directory: the server takes absolute
    paths only (relative to what? its directory is nothing its callers know)."""
    if isinstance(value, str | os.PathLike) and isinstance(text := os.fspath(value), str):
        return os.path.abspath(text)
    return value


def mapping(value: Any) -> Any:
    return dict(value) if value is not None else None


def sandbox(policy: Sandbox | None) -> dict[str, Any] | None:
    """A policy as the ledger keeps it (``Sandbox.to_json``): ``{"write": [...]}``,
    ``{"none": true}``; the server reads it back with ``Sandbox.from_json``."""
    checked = check_sandbox(policy)
    return None if checked is None else checked.to_json()
