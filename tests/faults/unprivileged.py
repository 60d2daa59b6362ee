"""Run a test's supervisor as an unprivileged user, where process limits apply.

Root ignores RLIMIT_NPROC (CAP_SYS_RESOURCE), so a test about running out of
processes runs its supervisor as ``nobody``. The interpreter may live where
only root can reach it (a home directory of mode 0700), so the switch keeps one
capability, CAP_DAC_READ_SEARCH (look up and read files): nothing about limits
or killing. A test that is not root runs as itself: it is unprivileged already.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

NOBODY = 65534


def command_prefix() -> list[str]:
    """What to put before argv so it runs unprivileged; skips when it cannot."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux): cannot drop to nobody")
    return [
        setpriv,
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "--inh-caps=-all,+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ]


@contextlib.contextmanager
def owned_dir() -> Iterator[Path]:
    """A fresh directory the unprivileged user owns (under /tmp: reachable by it)."""
    path = Path(tempfile.mkdtemp(prefix="workunits-unpriv-"))
    try:
        if os.geteuid() == 0:
            os.chown(path, NOBODY, NOBODY)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
