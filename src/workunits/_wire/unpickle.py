"""Loading a value a unit pickled: it loads, or UnloadableValue says why it cannot.

Unpickling runs the value's own code -- the imports of its classes, the
callables its ``__reduce__`` named, its ``__setstate__`` -- so it fails in
ways of the value's choosing: a class this process cannot import, a rebuild
that raises. Either is UnloadableValue naming the unit, what could not be
loaded and why, chained to the original error. The value's own exception is
never raised as it is: a caller of ``result()`` would take it for the unit's
failure, though the unit completed and its value is intact.

Runs in the caller's thread (or a unit's process, for a child's result).
"""

from __future__ import annotations

import importlib
import io
import pickle
from types import ModuleType, TracebackType
from typing import Any

from workunits._core.errors import UnloadableValue
from workunits._core.moved import current_module


def load(data: bytes, work_id: str, what: str) -> Any:
    """The value pickled in ``data`` (cloudpickle's format: pickle's own).

    ``what`` names it in an error ("result"). Only for bytes this state dir
    signed, or a unit of this supervisor handed over: loading runs their code.
    """
    try:
        return _NamingUnpickler(io.BytesIO(data)).load()
    except _Unimportable as missing:
        raise UnloadableValue(
            f"unit {work_id}: its {what} needs {missing.name}, which cannot be imported in "
            f"this process ({missing.cause}); load it where that code is importable",
            missing.name,
        ) from missing.cause
    except Exception as exc:  # a rebuild runs the value's code, which may raise anything
        name = _rebuilder(exc.__traceback__)
        raise UnloadableValue(
            f"unit {work_id}: its {what} cannot be loaded in this process: rebuilding it "
            f"({name}) raised {type(exc).__name__}: {exc}. The unit completed; its value is "
            f"kept as it was stored, and loads only where that rebuild succeeds",
            name,
        ) from exc


def loads(data: bytes) -> Any:
    """``pickle.loads``, except that a class of a module that has moved since the bytes
    were written loads from where it is now (``_core.moved``): for bytes that may be
    older than this code (a stored cause, a resumed unit's call)."""
    return _MovedUnpickler(io.BytesIO(data)).load()


def _rebuilder(tb: TracebackType | None) -> str:
    """The function the unpickler called that raised (``module.qualname``), when one did.

    ``tb`` starts at ``load``'s frame; the next is the first Python code the
    unpickler ran for the value (its ``__reduce__`` callable, ``__setstate__``,
    a constructor). None: the unpickler itself refused the bytes.
    """
    called = None if tb is None else tb.tb_next
    if called is None:
        return "pickle"
    frame = called.tb_frame
    module = frame.f_globals.get("__name__", "?")
    return f"{module}.{frame.f_code.co_qualname}"


class _Unimportable(Exception):
    def __init__(self, name: str, cause: Exception) -> None:
        super().__init__(name)
        self.name = name
        self.cause = cause


def _subimport(name: str) -> ModuleType:
    """cloudpickle's ``subimport`` (how a function pickled by value names the modules
    it uses), for a module that may have moved."""
    return importlib.import_module(current_module(name))


class _MovedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that finds a moved module's classes where they are now."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "cloudpickle.cloudpickle" and name == "subimport":
            return _subimport
        return super().find_class(current_module(module), name)


class _NamingUnpickler(_MovedUnpickler):
    """``pickle.loads`` (what ``cloudpickle.loads`` is) that says which class is missing.

    A value whose class cannot be imported here would otherwise surface as a
    bare ModuleNotFoundError or AttributeError from deep inside pickle.
    """

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception as exc:  # importing runs the module's code: any error
            raise _Unimportable(f"{module}.{name}", exc) from exc
