"""Every code example in README.md and docs/ runs as a test (sybil).

Each Markdown file is one namespace, run top to bottom in a fresh empty
directory, so examples build on each other and leave nothing in the checkout:

- ```` ```python ```` blocks run in that namespace (``__name__`` is ``__main__``,
  so functions handed to agents travel by value, as they would from a script);
- ```` ```sh ```` blocks run with ``bash -euo pipefail`` in that directory, with
  this interpreter's ``bin/`` first on PATH (``workunits``, ``python``); a
  block's background jobs (``workunits serve &``) get SIGTERM when it ends;
- ``<!-- skip: next "why" -->`` before a block says why it cannot run here.

Other fences (``text``, ``ini``, ``toml``, ``console``) are output and files, not examples.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent


# Terminal-like signal dispositions for every process the tests start.
# `nohup make test`, or `make test &` from a non-interactive shell (as CI runners
# start jobs), starts pytest with SIGHUP / SIGINT ignored, and an ignore survives
# exec: every supervisor, `tail -f` and `watch` a test starts would inherit it and
# (rightly) honour it, so a test that sends Ctrl-C or a hangup would wait forever.
# A Python handler, unlike SIG_IGN, is reset to the default on exec: pytest itself
# keeps ignoring the signal (the `nohup` its user asked for), while its children
# start as a terminal would start them. The marker carries the choice to
# pytest-xdist's workers, which are exec'd and so start with the defaults.
# tests/test_shutdown.py pins that a supervisor honours an inherited ignore.
_IGNORED_ENV = "WORKUNITS_TESTS_IGNORED_SIGNALS"


def _ignore_here_only(signum: int, frame: object) -> None:
    """Ignore the signal in this process; children exec'd from it get the default."""


def _keep_ignores_out_of_children() -> None:
    inherited = {int(s) for s in os.environ.get(_IGNORED_ENV, "").split(",") if s}
    for signum in (signal.SIGHUP, signal.SIGINT):
        if signum in inherited or signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, _ignore_here_only)
            inherited.add(signum)
    if inherited:
        os.environ[_IGNORED_ENV] = ",".join(str(s) for s in sorted(inherited))


_keep_ignores_out_of_children()
SHELL_TIMEOUT = 60.0

# Kill the block's background jobs when it ends (a served state dir, a tail -f).
_PROLOGUE = "trap 'jobs -p | xargs -r kill 2>/dev/null; wait' EXIT\n"


def _run_shell(example: Example) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("WORKUNITS_STATE", None)
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-euo", "pipefail", "-c", _PROLOGUE + example.parsed],
        cwd=example.namespace["__docdir__"],
        env=env,
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"shell example exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
        )


def _setup(namespace: dict[str, Any]) -> None:
    docdir = tempfile.mkdtemp(prefix="wu-doc-")
    namespace["__name__"] = "__main__"
    namespace["__docdir__"] = docdir
    namespace["__oldcwd__"] = os.getcwd()
    os.chdir(docdir)  # the zygote, started later, imports modules written here too


def _teardown(namespace: dict[str, Any]) -> None:
    os.chdir(namespace["__oldcwd__"])
    shutil.rmtree(namespace["__docdir__"], ignore_errors=True)


pytest_collect_file = Sybil(
    parsers=[
        PythonCodeBlockParser(),
        CodeBlockParser(language="sh", evaluator=_run_shell),
        SkipParser(),
    ],
    path=str(ROOT),
    patterns=["README.md", "docs/*.md", "docs/**/*.md"],
    setup=_setup,
    teardown=_teardown,
).pytest()
