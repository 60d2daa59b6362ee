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
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent
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
