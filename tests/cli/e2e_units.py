"""Unit bodies for the end-to-end CLI tests, importable by reference in ``workunits serve``.

They block on a FIFO the test writes to when it wants them to go on, so the
tests decide when a unit ends without sleeping.
"""

from __future__ import annotations

import workunits as wu


def half_way_then(fifo: str) -> str:
    """Report progress, say so, then finish with what the test writes to ``fifo``."""
    wu.current().progress(0.5, "half way")
    print("waiting for the go", flush=True)
    with open(fifo) as f:
        word = f.readline().strip()
    print(f"got {word}", flush=True)
    return word
