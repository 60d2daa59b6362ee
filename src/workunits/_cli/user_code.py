"""``serve --import MODULE``: user code imported before the supervisor starts.

A module may set up what its units need (imports, cloudpickle registrations,
logging) and name custom kinds in ``WORKUNITS_KINDS = {letter: WorkActor
subclass}``. Workflows and agents need nothing more: they are submitted by
import reference (``workunits submit --workflow pkg.mod:fn``) and resolved
where the supervisor runs, which has imported their modules by then.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Mapping, Sequence

from workunits._core.errors import SpecError
from workunits.actors.base import WorkActor

KINDS_ATTRIBUTE = "WORKUNITS_KINDS"


def import_all(modules: Sequence[str]) -> dict[str, type[WorkActor]]:
    """Import each module (the working directory first on the path, as ``python -m`` has it).

    Returns the kinds they declare; SpecError names a module that fails to
    import, with the first lines of why, or a kind declared twice.
    """
    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    kinds: dict[str, type[WorkActor]] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # any failure of user code is reported, once
            where = "".join(traceback.format_exception_only(exc)).strip()
            raise SpecError(f"--import {name}: importing it failed: {where}") from exc
        declared = getattr(module, KINDS_ATTRIBUTE, None)
        if declared is None:
            continue
        if not isinstance(declared, Mapping):
            raise SpecError(
                f"--import {name}: {KINDS_ATTRIBUTE} must map kind letters to WorkActor "
                f"subclasses, got {type(declared).__name__}"
            )
        for letter, actor_class in declared.items():
            if letter in kinds and kinds[letter] is not actor_class:
                raise SpecError(f"--import {name}: kind {letter!r} is declared twice")
            kinds[letter] = actor_class
    return kinds
