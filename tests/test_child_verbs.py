"""A unit acts on its descendants through its channel, with the verbs every surface has.

``wu.current()`` offers what ``Supervisor`` offers for units (``_surface.surfaces``):
here its newer verbs -- ``stream``, ``read_output``, ``list``, ``tree``, ``retry``,
``signal``, ``workflow`` -- and the options its submits share with the others,
each through the unit's channel (``supervisor/actor/children.py``), never the
state dir's files or the ledger.
"""

from __future__ import annotations

import pytest

import workunits as wu

# -- bodies run in unit processes (module-level so they pickle by reference) ---


def stream_a_child() -> dict[str, object]:
    ctx = wu.current()
    child = ctx.shell("printf 'one\\n'; sleep 0.2; printf 'two\\n'; sleep 0.2; printf 'three\\n'")
    seen = b"".join(child.stream())
    return {"seen": seen.decode(), "created": child.created, "kind": type(child).__name__}


def read_a_child_in_pieces() -> dict[str, object]:
    ctx = wu.current()
    child = ctx.shell("printf 'abcdef'")
    child.wait(timeout=30)
    first = child.read_output(3)
    second = ctx.read_output(child, 10)
    again = ctx.read_output(child, offset=1)
    return {
        "first": first.decode(),
        "second": second.decode(),
        "chunk": (again.start, again.data.decode()),
    }


def list_and_tree_of_children() -> dict[str, object]:
    ctx = wu.current()
    shells = [ctx.shell(f"echo {i}", description=f"shell {i}") for i in range(2)]
    agent = ctx.agent(add, 1, 2, description="adder")
    for handle in [*shells, agent]:
        handle.wait(timeout=30)
    listed = ctx.list()
    return {
        "listed": sorted(r.id for r in listed),
        "started": sorted([*(s.id for s in shells), agent.id]),
        "shells": sorted(r.id for r in ctx.list(kind="shell")),
        "completed": len(ctx.list(status="completed")),
        "paged": [r.id for r in ctx.list(limit=1)],
        "tree": ctx.tree(),
    }


def add(a: int, b: int) -> int:
    return a + b


def sečti(a: int, b: int) -> int:  # noqa: PLC2401 - a name Python takes, import references do not
    return a + b


def a_child_named_past_ascii() -> int:
    """Its function imports back, but its name is no import reference: sent by value."""
    return int(wu.current().agent(sečti, 2, 3).result(timeout=30))


def retry_a_failed_child() -> dict[str, object]:
    ctx = wu.current()
    child = ctx.shell("exit 3")
    child.wait(timeout=30)
    again = ctx.retry(child)
    same = ctx.retry(child)
    return {
        "again": again.id,
        "same": same.id,
        "created": (again.created, same.created),
        "status": again.wait(timeout=30).status.value,
        "retry_of": again.get().retry_of,
    }


def waits_for_approval() -> str:
    return str(wu.current().wait_for("approve", timeout=30))


def signal_a_child() -> str:
    ctx = wu.current()
    child = ctx.agent(waits_for_approval)
    assert ctx.signal(child, "approve", "yes")
    return str(child.result(timeout=30))


def workflow_body(n: int) -> int:
    return int(wu.current().step("double", lambda: n * 2))


def start_a_child_workflow() -> tuple[str, int]:
    ctx = wu.current()
    child = ctx.workflow(workflow_body, 21, max_attempts=2, output_cap=1 << 20)
    return child.get().kind, int(child.result(timeout=30))


def not_a_descendant(other: str) -> str:
    try:
        wu.current().read_output(other)
    except wu.WorkunitsError as exc:
        return str(exc)
    return "read it"


def idempotent_children() -> tuple[bool, bool, str, str]:
    ctx = wu.current()
    first = ctx.shell("true", key="once")
    second = ctx.shell("true", key="once")
    return first.created, second.created, first.id, second.id


# -- the tests -------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_unit_streams_its_childs_output_as_it_is_written(sup: wu.Supervisor) -> None:
    got = sup.agent(stream_a_child).result(timeout=45)
    assert got == {"seen": "one\ntwo\nthree\n", "created": True, "kind": "ChildHandle"}


@pytest.mark.timeout(60)
def test_a_unit_reads_its_childs_output_from_the_supervisors_offset(sup: wu.Supervisor) -> None:
    got = sup.agent(read_a_child_in_pieces).result(timeout=45)
    # The offset is the unit's record's: the second read goes on after the first,
    # and a read from an offset leaves it alone.
    assert got == {"first": "abc", "second": "def", "chunk": (1, "bcdef")}


@pytest.mark.timeout(60)
def test_a_unit_lists_its_descendants_and_draws_their_tree(sup: wu.Supervisor) -> None:
    parent = sup.agent(list_and_tree_of_children)
    got = parent.result(timeout=45)
    assert got["listed"] == got["started"]
    assert len(got["shells"]) == 2
    assert got["completed"] == 3
    assert len(got["paged"]) == 1
    assert "adder" in str(got["tree"])
    assert parent.id not in str(got["tree"])  # its own descendants only


@pytest.mark.timeout(60)
def test_a_unit_retries_a_failed_child_once(sup: wu.Supervisor) -> None:
    parent = sup.agent(retry_a_failed_child)
    got = parent.result(timeout=45)
    assert got["again"] == got["same"]
    assert got["created"] == (True, False)
    assert got["status"] == "failed"
    assert sup.get(str(got["again"])).parent == parent.id  # still the unit's child


@pytest.mark.timeout(60)
def test_a_unit_starts_a_child_whose_function_has_a_name_past_ascii(sup: wu.Supervisor) -> None:
    """The unit and the supervisor agree on what an import reference is: a name the
    supervisor would refuse is not sent as one."""
    assert sup.agent(a_child_named_past_ascii).result(timeout=45) == 5


@pytest.mark.timeout(60)
def test_a_unit_signals_its_child(sup: wu.Supervisor) -> None:
    assert sup.agent(signal_a_child).result(timeout=45) == "yes"


@pytest.mark.timeout(60)
def test_a_unit_starts_a_child_workflow_with_the_options_every_surface_takes(
    sup: wu.Supervisor,
) -> None:
    assert sup.agent(start_a_child_workflow).result(timeout=45) == ("workflow", 42)


@pytest.mark.timeout(60)
def test_a_unit_cannot_read_a_unit_that_is_not_its_descendant(sup: wu.Supervisor) -> None:
    other = sup.shell("echo private")
    other.wait(timeout=30)
    answer = sup.agent(not_a_descendant, other.id).result(timeout=45)
    assert "not a descendant" in answer


@pytest.mark.timeout(60)
def test_a_childs_handle_says_whether_its_key_created_it(sup: wu.Supervisor) -> None:
    first, second, one, two = sup.agent(idempotent_children).result(timeout=45)
    assert (first, second) == (True, False)
    assert one == two


def feed_a_child() -> str:
    ctx = wu.current()
    child = ctx.shell("tr a-z A-Z", stdin=True)
    assert ctx.send_input(child, "through the channel\n")
    assert child.send_input("", eof=True)
    child.wait(timeout=30)
    return b"".join(child.stream()).decode()


@pytest.mark.timeout(60)
def test_a_unit_writes_to_its_childs_stdin_through_its_channel(sup: wu.Supervisor) -> None:
    assert sup.agent(feed_a_child).result(timeout=45) == "THROUGH THE CHANNEL\n"
