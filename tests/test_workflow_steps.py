"""Workflow steps under use a user may make of them: threads, repeated names, odd text.

A step's function runs once per name; its result is stored with the checkpoint.
Found by an audit: steps from several threads raised after their functions
ran, a name used again with other arguments returned the first call's result,
and a name or an error message holding an undecodable byte failed the unit
without its cause.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import cloudpickle
import pytest

import workunits as wu

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 60.0
UNDECODABLE = os.fsdecode(b"report-\xff.csv")  # what os.listdir gives for such a name


def item(i: int) -> dict[str, object]:
    return {"i": i, "pad": list(range(50))}


def steps_from_threads(threads: int, per_thread: int) -> dict[str, object]:
    ctx = wu.current()
    errors: list[str] = []

    def work(t: int) -> None:
        for j in range(per_thread):
            try:
                assert ctx.step(f"t{t}-{j}", item, t * 1000 + j)["i"] == t * 1000 + j
            except BaseException as exc:  # noqa: BLE001 - counted, and the first few shown
                errors.append(f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return {"errors": errors[:3], "failed": len(errors)}


def same_name(first: str, second: str) -> list[object]:
    ctx = wu.current()
    ran: list[str] = []

    def fetch(url: str) -> str:
        ran.append(url)
        return f"body of {url}"

    results: list[object] = [ctx.step("fetch", fetch, first)]
    try:
        results.append(ctx.step("fetch", fetch, second))
    except wu.SpecError as exc:
        results.append(f"SpecError: {exc}")
    return [*results, ran]


def step_named(name: str) -> list[str]:
    ran: list[str] = []
    try:
        wu.current().step(name, ran.append, "ran")
    except wu.SpecError as exc:
        return [f"SpecError: {exc}", *ran]
    return ran


def raise_naming(path: str) -> None:
    raise ValueError(f"cannot parse {path}")


@pytest.mark.timeout(120)
def test_steps_run_from_several_threads_all_land(sup: wu.Supervisor) -> None:
    done = sup.workflow(steps_from_threads, 4, 100).result(timeout=WAIT)
    assert done == {"errors": [], "failed": 0}


@pytest.mark.timeout(60)
def test_a_step_name_used_again_with_other_arguments_is_refused(sup: wu.Supervisor) -> None:
    body, refused, ran = sup.workflow(same_name, "a", "b").result(timeout=WAIT)
    assert body == "body of a"
    assert isinstance(refused, str)
    assert refused.startswith("SpecError: step 'fetch' already ran in this attempt")
    assert ran == ["a"]


@pytest.mark.timeout(60)
def test_a_step_name_used_again_with_the_same_arguments_returns_its_result(
    sup: wu.Supervisor,
) -> None:
    assert sup.workflow(same_name, "a", "a").result(timeout=WAIT) == [
        "body of a",
        "body of a",
        ["a"],  # it ran once
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["", UNDECODABLE])
def test_a_step_name_the_checkpoint_cannot_hold_is_refused_before_the_step_runs(
    sup: wu.Supervisor, name: str
) -> None:
    (refused,) = sup.workflow(step_named, name).result(timeout=WAIT)
    assert refused.startswith("SpecError: ")


@pytest.mark.timeout(60)
def test_an_error_naming_an_undecodable_path_keeps_its_cause(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    record = sup.agent(raise_naming, UNDECODABLE).wait(timeout=WAIT)
    assert (record.status, record.exit_code) == (wu.Status.FAILED, 1)
    assert (record.error or "").startswith("ValueError: cannot parse report-\\udcff.csv")
