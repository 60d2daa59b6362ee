"""Pickling a call for the unit process so that its tracebacks name the real file.

cloudpickle pickles code it cannot import (a function defined in ``__main__``,
a lambda, a closure) by value, and on the way sets every code object's
``co_filename`` to ``"<dynamic-code>"`` to keep payloads deterministic. A
traceback from the unit then says ``File "<dynamic-code>"`` with no source
line. This pickler carries code objects with ``marshal`` instead, which keeps
every field, the file name included: the unit's traceback names the script
and ``linecache`` shows its lines (the unit runs on this machine, and the
zygote forked it from this interpreter's exact version, which marshal needs).
"""

from __future__ import annotations

import io
import marshal
import pickle
import types
from collections import ChainMap
from typing import Any, ClassVar

import cloudpickle


def _code_from_marshal(data: bytes) -> types.CodeType:
    # The bytes came inside a pickle, which runs code as it loads anyway: no new trust.
    code = marshal.loads(data)  # noqa: S302
    assert isinstance(code, types.CodeType)
    return code


def _reduce_code(code: types.CodeType) -> tuple[Any, tuple[bytes]]:
    return _code_from_marshal, (marshal.dumps(code),)


class _CallPickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle is untyped
    dispatch_table: ClassVar[ChainMap[Any, Any]] = ChainMap(
        {types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table
    )


def dumps_call(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with code objects that keep their file names."""
    buffer = io.BytesIO()
    _CallPickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()
