"""CPython's own ``concurrent.futures`` tests, run against this package's executors.

The cases are not copied here: they are loaded from the CPython test suite of
the running Python's minor version (``Lib/test/test_concurrent_futures.py``,
which Debian ships in ``libpython3.X-testsuite``; ``make test`` installs it
where it may), and mixed with ``SupervisorExecutorMixin`` in place of the
stdlib's executors. Which cases run, which are adapted and which are skipped,
each with its reason, is in ``docs/guides/batches.md``; the two dicts below
are that list, and ``tests/test_executor.py`` checks the page names every one.
"""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import cloudpickle

import workunits as wu

CASE_CLASSES = ("ExecutorTest", "WaitTests", "AsCompletedTests", "ExecutorShutdownTest")

# Cases skipped, with why: each depends on what a thread or process pool is,
# or on what the interpreter does at exit, not on the executor contract.
SKIPPED: dict[str, str] = {
    "test_interpreter_shutdown": (
        "a fresh interpreter that leaves a task running at exit: the stdlib's atexit hook "
        "waits for it, while a supervisor's exit ends every unit it runs (invariant 10)"
    ),
    "test_submit_after_interpreter_shutdown": (
        "imports the stdlib's executor classes by name in a fresh interpreter and submits "
        "from an atexit hook: it tests the stdlib's own exit hook"
    ),
    "test_no_stale_references": (
        "a unit's record keeps its call (the callable and its arguments) while it is in "
        "memory, so that retry(id) writes the same spec again: the objects are freed when "
        "the record is evicted, not when the task ends"
    ),
    "test_hang_gh83386": (
        "a fresh interpreter that exits with a task running, as test_interpreter_shutdown: "
        "units are ended at exit, by design"
    ),
}

# Cases run with a change, and what changed.
ADAPTED: dict[str, str] = {
    "setUp": (  # and tearDown
        "the executor comes from one supervisor per test class (sup.executor(max_workers=5) "
        "or sup.pool(max_workers=5)), not from the stdlib's constructor; BaseTestCase's "
        "check that every thread started by a test has ended is left out: the supervisor's "
        "actors, Reaper and ticker live as long as the supervisor, past one test"
    ),
    "test_max_workers_negative": (
        "executor_type is sup.executor / sup.pool with the same keyword; the error is "
        "SpecError, a ValueError with the stdlib's message"
    ),
}

HERE = Path(__file__).resolve().parent


def cpython_suite() -> ModuleType | None:
    """CPython's test_concurrent_futures for this Python's minor version, or None."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for stdlib in (sysconfig.get_path("stdlib"), f"/usr/lib/python{version}"):
        path = Path(stdlib) / "test" / "test_concurrent_futures.py"
        if path.is_file():
            break
    else:
        return None
    name = "cpython_test_concurrent_futures"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    # Its functions (mul, capture, sleep_and_raise...) run in the units' processes,
    # where this module cannot be imported by name: they travel by value.
    cloudpickle.register_pickle_by_value(module)
    return module


SKIP_REASON = (
    "CPython's Lib/test/test_concurrent_futures.py for Python "
    f"{sys.version_info.major}.{sys.version_info.minor} is not installed (Debian: "
    f"libpython{sys.version_info.major}.{sys.version_info.minor}-testsuite; "
    "3.12 and later split it into a package, not loaded here)"
)


class SupervisorExecutorMixin:
    """In place of CPython's ``ExecutorMixin``: the executor is a supervisor's."""

    worker_count = 5
    make: ClassVar[Callable[[wu.Supervisor, int], Any]]
    sup: ClassVar[wu.Supervisor]
    _dir: ClassVar[tempfile.TemporaryDirectory[str]]

    @classmethod
    def setUpClass(cls) -> None:
        cls._dir = tempfile.TemporaryDirectory(prefix="wu-cpython-")
        cls.sup = wu.Supervisor(cls._dir.name, install_signal_handlers=False, pool_size=2)
        cls.sup.__enter__()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sup.close()
        cls._dir.cleanup()

    def setUp(self) -> None:
        self.executor = self.executor_type(max_workers=self.worker_count)

    def tearDown(self) -> None:
        self.executor.shutdown(wait=True)
        self.executor = None

    def executor_type(self, max_workers: int) -> Any:
        return type(self).make(self.sup, max_workers)


def cases(make: Callable[[wu.Supervisor, int], Any], prefix: str) -> dict[str, type]:
    """The test classes for one executor, by name: for a test module's globals."""
    module = cpython_suite()
    if module is None:

        @unittest.skip(SKIP_REASON)
        class NotInstalled(unittest.TestCase):
            def test_cpython_suite(self) -> None:
                raise AssertionError("skipped")

        return {f"{prefix}CPythonSuite": NotInstalled}
    out: dict[str, type] = {}
    for case_name in CASE_CLASSES:
        case = getattr(module, case_name)
        skips = {
            name: unittest.skip(reason)(getattr(case, name))
            for name, reason in SKIPPED.items()
            if hasattr(case, name)
        }
        name = f"{prefix}{case_name}"
        out[name] = type(
            name,
            (case, SupervisorExecutorMixin, unittest.TestCase),
            {"make": staticmethod(make), **skips},
        )
    return out
