"""What a signal's name may be: checked where it is sent and where it is waited for."""

from __future__ import annotations

from typing import Final

from workunits._core.errors import SpecError

MAX_NAME: Final = 200


def check_name(name: object) -> str:
    """A signal's name: a non-empty printable string (SpecError otherwise)."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not name.isprintable():
        raise SpecError(
            f"a signal name is a non-empty printable string of at most {MAX_NAME} "
            f"characters, got {name!r}"
        )
    return name
