"""A state dir written before modules moved (issue 37) still opens and its values load.

The ledger keeps names of code: a pickled result names its classes by module,
a spec stored by reference is ``module:qualname``, a retry policy names the
exception types it retries, built-in bodies are ``BodyRef``s. Each test writes
such a name the old way and reads it back through the code that loads it.
"""

from __future__ import annotations

import importlib
import pickle
import sqlite3
from pathlib import Path

import pytest

import workunits as wu
from workunits._core.moved import MOVED, current_module, current_ref
from workunits._core.record import Outcome
from workunits._ledger import values
from workunits._util import shell_log
from workunits._wire import unpickle
from workunits._wire.specs import BodyRef, resolve_callable, resolve_ref


def old_way(value: object) -> bytes:
    """``value`` pickled as the previous layout wrote it: its classes under their old modules.

    Protocol 3 names a class as text (``c<module>\\n<name>\\n``), so the old module
    can be put back without recomputing lengths; the unpickler reads any protocol.
    """
    data = pickle.dumps(value, protocol=3)
    for old, new in MOVED.items():
        data = data.replace(b"c" + new.encode() + b"\n", b"c" + old.encode() + b"\n")
    return data


def a_policy_and_a_status() -> tuple[wu.Retry, wu.Status]:
    return wu.Retry(max_attempts=4, jitter=False), wu.Status.FAILED


def test_every_old_module_names_one_that_imports() -> None:
    for old, new in MOVED.items():
        assert old.startswith("workunits.")
        assert old != new
        assert importlib.import_module(new).__name__ == new, old


def test_names_that_never_moved_are_left_alone() -> None:
    assert current_module("workunits._wire.specs") == "workunits._wire.specs"
    assert current_module("mypackage.jobs") == "mypackage.jobs"
    assert current_ref("mypackage.jobs:run") == "mypackage.jobs:run"
    assert current_ref("no reference") == "no reference"


def test_a_value_pickled_under_the_old_layout_unpickles() -> None:
    data = old_way(a_policy_and_a_status())
    assert b"cworkunits._retry\n" in data  # written the old way
    assert b"cworkunits._core.status\n" not in data
    assert unpickle.load(data, "a00000000", "result") == a_policy_and_a_status()
    assert unpickle.loads(data) == a_policy_and_a_status()


def test_an_unimportable_class_is_still_named_in_the_error() -> None:
    data = pickle.dumps(wu.Status.FAILED, protocol=3).replace(
        b"cworkunits._core.status\n", b"cworkunits._nowhere\n"
    )
    with pytest.raises(wu.UnloadableValue, match=r"workunits\._nowhere\.Status"):
        unpickle.load(data, "a00000000", "result")


def test_a_reference_stored_under_the_old_layout_resolves() -> None:
    assert resolve_ref("workunits._wire.shell_log:check") is shell_log.check
    assert resolve_callable("workunits._wire.shell_log:check") is shell_log.check
    bucket = BodyRef("workunits._runtime.ratelimit", "TokenBucket")(5.0, 1.0, 0.0)
    assert type(bucket).__module__ == "workunits._unit.ratelimit"


def test_a_policy_naming_an_old_module_retries_what_units_report_now() -> None:
    policy = wu.Retry.from_json(
        wu.Retry(on=("workunits._errors:UnknownWork",), max_attempts=2).to_json()
    )
    reported = Outcome(
        wu.Status.FAILED,
        error="UnknownWork: gone",
        error_types=("workunits._core.errors:UnknownWork", "builtins:Exception"),
    )
    assert policy.retries(reported)
    other = Outcome(wu.Status.FAILED, error="KeyError", error_types=("builtins:KeyError",))
    assert not policy.retries(other)


def test_a_state_dir_with_an_old_pickled_result_opens_and_reads_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state_dir=state) as sup:
        work_id = sup.agent(a_policy_and_a_status).id
        assert sup.result(work_id, timeout=30) == a_policy_and_a_status()
    # Rewrite the stored result as the previous layout pickled it, signed as a
    # ledger seals a pickle (this state dir's key, this installation's versions).
    old = old_way(a_policy_and_a_status())
    key = values.load_key(state)
    assert key is not None
    sealed = values.seal(old, "pickle", purpose="result", work_id=work_id, key=key)
    with sqlite3.connect(state / "ledger.db") as db:
        changed = db.execute(
            "UPDATE units SET result = ?, result_mac = ?, result_versions = ? "
            "WHERE id = ? AND result_format = 'pickle' AND result_file IS NULL",
            (old, sealed.mac, sealed.versions, work_id),
        ).rowcount
    assert changed == 1
    with wu.connect(state) as client:
        assert client.result(work_id, timeout=10) == a_policy_and_a_status()
    with wu.Supervisor(state_dir=state) as sup:
        assert sup.result(work_id, timeout=10) == a_policy_and_a_status()
