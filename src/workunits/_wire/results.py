"""Turning a terminal record (or a teammate's answer) into what the caller gets or raises.

Runs in the caller's thread (or the parent unit's process), never in the
supervisor actor: unpickling a unit's value runs the unit's code.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
import orjson

from workunits._core.errors import (
    TeammateError,
    WorkExpired,
    WorkFailed,
    WorkKilled,
    WorkunitsError,
)
from workunits._core.record import WorkRecord
from workunits._core.status import Status
from workunits._util import strictjson
from workunits._wire import frames as m
from workunits._wire import unpickle


def decode_value(data: bytes, fmt: str) -> Any:
    if fmt == "json":
        return orjson.loads(data)
    return cloudpickle.loads(data)


def result_of(record: WorkRecord) -> Any:
    """The value of a completed unit (its record for kinds without values, like shell)."""
    if record.expired_at is not None:
        raise WorkExpired(record)
    if record.status == Status.COMPLETED:
        if record.result is None or record.result_format is None:
            return record
        if record.result_format == "json":  # a row's column: a bad one is LedgerCorrupt
            return strictjson.loads(record.result, record.id, "result")
        # Rebuilding it runs the value's code: one that fails is UnloadableValue.
        return unpickle.load(record.result, record.id, "result")
    if record.status == Status.KILLED:
        raise WorkKilled(record)
    failure = WorkFailed(record)
    cause: BaseException | None = None
    if record.cause is not None:
        try:
            loaded = unpickle.loads(record.cause)  # durable: may name moved modules
        except Exception:  # noqa: BLE001 - the cause is a courtesy; the text is in record.error
            loaded = None
        if isinstance(loaded, BaseException):
            cause = loaded
    raise failure from cause


def answer_of(answer: m.Answer) -> Any:
    """The teammate's answer, or its handler's exception raised here.

    The exception itself when it unpickles (with the teammate's traceback as a
    note), else TeammateError carrying its type, message and traceback.
    """
    error = answer.error
    if error is None:
        assert answer.result is not None, "an Answer has a result or an error"
        return decode_value(answer.result.value, answer.result.format)
    loaded = None
    if error.cause is not None:
        try:
            loaded = cloudpickle.loads(error.cause)
        except Exception:  # noqa: BLE001 - it does not unpickle here: report it as text
            loaded = None
    if not isinstance(loaded, BaseException):
        raise TeammateError(error.type, error.message, error.traceback)
    if error.traceback:
        loaded.add_note("raised in the teammate's process:\n" + error.traceback.rstrip())
    raise loaded


def reply_of(ok: bool, value: Any) -> Any:
    """What a route delivered (see ``supervisor.actor.asks``), as a value or a raise."""
    if ok:
        return answer_of(value)
    if isinstance(value, BaseException):
        raise value
    raise WorkunitsError(str(value))
