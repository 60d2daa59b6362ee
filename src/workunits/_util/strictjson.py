"""JSON for durable values that must come back equal, or be refused.

orjson quietly turns tuples into lists, writes NaN as ``null`` and refuses
non-string keys and integers beyond 64 bits only with a terse message. A
checkpoint that comes back different from what was saved resumes a unit in a
state nobody wrote, so every value is walked first and anything JSON would not
bring back equal -- with the same types -- is refused with the path to it and
what to do instead. Nothing is ever converted silently.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import orjson

from workunits._core.errors import REPAIR, LedgerCorrupt, SpecError, UnstorableValue

# orjson serializes signed and unsigned 64-bit integers; beyond that it raises.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
# orjson's own nesting limit; deeper values (or cycles) are refused by the walk.
MAX_DEPTH = 254


def dumps(value: object, what: str, *, sort_keys: bool = False) -> bytes:
    """Encode ``value`` as JSON, or raise UnstorableValue naming the offending path.

    ``what`` names the value in the message ("checkpoint of a1b2c3d4e").
    ``sort_keys`` gives one encoding per value, for hashing.
    """
    _walk(value, "$", 0, what)
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    # The walk admits only exact JSON types, so this holds; it guards the walk itself.
    if orjson.loads(data) != value:
        raise UnstorableValue(f"{what} would not come back equal from JSON; nothing was stored")
    return data


def dumps_argument(value: object, what: str, *, sort_keys: bool = False, hint: str = "") -> bytes:
    """``dumps`` for what a caller passed (arguments, a name): a value JSON would not
    bring back equal is the caller's SpecError, its message naming the part (and
    ending with ``hint``)."""
    try:
        return dumps(value, what, sort_keys=sort_keys)
    except UnstorableValue as exc:
        raise SpecError(f"{exc}{hint}") from None


def dumps_if_exact(value: object, *, sort_keys: bool = False) -> bytes | None:
    """Like ``dumps``, but None instead of an error: for callers with a fallback."""
    try:
        return dumps(value, "value", sort_keys=sort_keys)
    except UnstorableValue:
        return None


def loads(data: bytes, work_id: str, column: str) -> Any:
    """Decode a JSON column; a bad one is LedgerCorrupt naming the unit and column, and
    saying how to repair the row."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise LedgerCorrupt(
            f"unit {work_id}: column {column} does not hold valid JSON ({exc}){REPAIR}"
        ) from None


def _walk(value: object, path: str, depth: int, what: str) -> None:
    if depth > MAX_DEPTH:
        raise UnstorableValue(
            f"{what} at {path}: nested deeper than {MAX_DEPTH} levels (or it contains "
            f"itself); flatten it"
        )
    # Exact types only: a subclass (bool aside) would come back as its base type.
    if value is None or type(value) is bool:
        return
    if type(value) is str:
        if not _is_text(value):
            _refuse(what, path, value, _NOT_TEXT)
        return
    if type(value) is int:
        if not INT_MIN <= value <= INT_MAX:
            _refuse(what, path, value, "is an integer beyond 64 bits; store it as a str")
        return
    if type(value) is float:
        if not math.isfinite(value):
            _refuse(
                what,
                path,
                value,
                "is not finite, and JSON has no NaN or infinity; store None or a str",
            )
        return
    if type(value) is list:
        for index, item in enumerate(value):
            _walk(item, f"{path}[{index}]", depth + 1, what)
        return
    if type(value) is dict:
        _walk_dict(value, path, depth, what)
        return
    _refuse(what, path, value, _advice(value))


def _walk_dict(value: dict[Any, Any], path: str, depth: int, what: str) -> None:
    for key, item in value.items():
        if type(key) is not str:
            _refuse(
                what,
                f"{path} key {key!r}",
                key,
                f"is a key of type {type(key).__name__}; JSON object keys are strings, so it "
                f"would come back as {str(key)!r}. Use str keys",
            )
        if not _is_text(key):
            _refuse(what, f"{path} key {key!r}", key, _NOT_TEXT)
        _walk(item, f"{path}[{key!r}]", depth + 1, what)


_NOT_TEXT = (
    "holds bytes that are not UTF-8 (as surrogates, the way os.fsdecode keeps them); "
    "JSON text cannot hold them. Store the bytes' base64 or a valid str"
)


def _is_text(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _advice(value: object) -> str:
    name = type(value).__name__
    if isinstance(value, tuple):
        return f"is a {name}; JSON would bring it back as a list. Store list(...) instead"
    if isinstance(value, set | frozenset):
        return f"is a {name}; JSON has no sets. Store sorted(...) as a list instead"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"is {name}; JSON has no bytes. Store base64 text or a path instead"
    if dataclasses.is_dataclass(value):
        return f"is a dataclass ({name}); store dataclasses.asdict(...) and rebuild it on load"
    if isinstance(value, str | int | float | dict | list):
        base = next(t for t in (bool, int, float, str, dict, list) if isinstance(value, t))
        return (
            f"is a {name}, a subclass of {base.__name__}; JSON would bring it back as a plain "
            f"{base.__name__}. Store {base.__name__}(...) of it"
        )
    return f"is a {name}, which JSON cannot hold; store dicts, lists, str, int, float, bool, None"


def _refuse(what: str, path: str, value: object, advice: str) -> None:
    # repr() of a whole 64 MiB bytes argument took a second: show a slice of a long one.
    if isinstance(value, str | bytes | bytearray) and len(value) > 60:
        value = value[:60]
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise UnstorableValue(f"{what} at {path}: {shown} {advice}; nothing was stored")
