"""Strict JSON for durable values: what goes in comes back equal, or it is refused.

orjson quietly turns tuples into lists and dataclasses into dicts; a checkpoint
or result that changed shape on its way to disk would resume wrong. So values
are checked first, and the error names the path and the type at fault.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import orjson

from workunits._errors import SpecError

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


class NotJsonable(SpecError, TypeError):
    """A value that would not survive a JSON round trip unchanged."""


def _problem(value: Any, path: str) -> str | None:
    """The first thing in ``value`` that JSON would not bring back equal, or None."""
    kind = type(value)
    if value is None or kind in (bool, str):
        return None
    if kind is int:
        return None if _INT_MIN <= value <= _INT_MAX else f"{path} is an int beyond 64 bits"
    if kind is float:
        return None if math.isfinite(value) else f"{path} is {value}, which JSON cannot hold"
    if kind is list:
        return _first(_problem(item, f"{path}[{i}]") for i, item in enumerate(value))
    if kind is dict:
        bad_key = next((k for k in value if not isinstance(k, str)), None)
        if bad_key is not None:
            return f"{path} has a {type(bad_key).__name__} key {bad_key!r}; JSON keys are str"
        return _first(_problem(item, f"{path}[{key!r}]") for key, item in value.items())
    if isinstance(value, tuple):
        return f"{path} is a tuple, which JSON would turn into a list; use a list"
    return f"{path} is a {kind.__name__}, which JSON cannot hold unchanged"


def _first(problems: Iterator[str | None]) -> str | None:
    return next((p for p in problems if p is not None), None)


def dumps_strict(value: Any, what: str) -> bytes:
    """orjson bytes of ``value``, or NotJsonable saying what is wrong and where."""
    problem = _problem(value, what)
    if problem:
        raise NotJsonable(f"{problem} (only None, bool, int, finite float, str, list, dict)")
    return orjson.dumps(value)


def is_jsonable(value: Any) -> bool:
    return _problem(value, "value") is None


def loads(data: bytes) -> Any:
    return orjson.loads(data)
