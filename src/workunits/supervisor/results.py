"""Turning a terminal record into what ``result()`` returns or raises.

Runs in the caller's thread (or the parent unit's process), never in the
supervisor actor: unpickling a unit's value runs the unit's code.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
import orjson

from workunits._errors import WorkFailed, WorkKilled
from workunits._record import WorkRecord
from workunits._status import Status


def decode_value(data: bytes, fmt: str) -> Any:
    if fmt == "json":
        return orjson.loads(data)
    return cloudpickle.loads(data)


def result_of(record: WorkRecord) -> Any:
    """The value of a completed unit (its record for kinds without values, like shell)."""
    if record.status == Status.COMPLETED:
        if record.result is None or record.result_format is None:
            return record
        return decode_value(record.result, record.result_format)
    if record.status == Status.KILLED:
        raise WorkKilled(record)
    failure = WorkFailed(record)
    cause: BaseException | None = None
    if record.cause is not None:
        try:
            loaded = cloudpickle.loads(record.cause)
        except Exception:  # noqa: BLE001 - the cause is a courtesy; the text is in record.error
            loaded = None
        if isinstance(loaded, BaseException):
            cause = loaded
    raise failure from cause
