"""CPython's executor tests (``Lib/test/test_concurrent_futures``) against ``sup.executor()``.

See ``tests/cpython/executor_cases.py`` for how they are loaded and which are
adapted or skipped, and why.
"""

from __future__ import annotations

from tests.cpython.executor_cases import cases

globals().update(cases(lambda sup, n: sup.executor(max_workers=n), "Agents"))
