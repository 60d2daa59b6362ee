"""The helper that makes the units' namespace dies with the process that forked it.

The zygote forks a helper to unshare and set up the namespace, opens its
namespace files and kills it. A zygote killed in between (its start cut short:
the supervisor closed, the guard died) must not leave the helper waiting for
ever. Here the parent kills itself at the moment it would open the helper's
files; the test waits (a timed wait on the helper's pidfd) for the helper to go.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux's"),
]

WAIT = 20.0

# The parent: UnitNamespace.create, which SIGKILLs itself when it opens the helper's
# mount namespace file (the helper is ready then), after printing the helper's pid.
_PARENT = textwrap.dedent(
    """
    import os, signal, sys
    from workunits._sandbox import namespace

    real_open = os.open

    def dying_open(path, flags, *args):
        if isinstance(path, str) and path.endswith("/ns/mnt"):
            print(path.split("/")[2], flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_open(path, flags, *args)

    os.open = dying_open
    try:
        namespace.UnitNamespace.create(namespace.Hiding.of([sys.argv[1]]))
    except OSError as exc:
        print("refused", exc, flush=True)
    """
)


def test_a_namespace_helper_goes_when_its_parent_is_killed(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    parent = subprocess.run(
        [sys.executable, "-c", _PARENT, str(hidden)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    answer = parent.stdout.strip()
    if answer.startswith("refused"):
        pytest.skip(f"this machine refuses the namespace: {answer}")
    assert parent.returncode == -9, parent.stderr
    helper = int(answer)
    try:
        pidfd = os.pidfd_open(helper)
    except ProcessLookupError:
        return  # gone already
    try:
        readable, _, _ = select.select([pidfd], [], [], WAIT)
        assert readable, f"the namespace helper {helper} outlived its parent"
    finally:
        os.close(pidfd)
