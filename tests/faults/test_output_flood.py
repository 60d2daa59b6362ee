"""Output flood: a unit writing as fast as it can past its cap is killed, memory stays flat.

Invariant 6 (output on disk, offset in memory) and §7's per-unit output cap: the
supervisor never holds a unit's output, so however fast a unit writes, its RSS
does not follow; the unit ends ``killed`` with reason ``output-cap``.
"""

from __future__ import annotations

import os
import threading

import pytest

from workunits import Reason, Status, Supervisor, is_terminal

from ._support import MIB, rss_bytes

CAP = 8 * MIB


@pytest.mark.parametrize(
    "cmd",
    [
        ["head", "-c", "2G", "/dev/zero"],
        ["yes", "flood"],
        # A writer that ignores SIGXFSZ: the kernel's limit then only fails its
        # writes, and the supervisor's own size check must kill it.
        ["sh", "-c", "trap '' XFSZ; while :; do yes flood; done"],
    ],
    ids=["head-zero", "yes", "ignores-sigxfsz"],
)
def test_a_flooding_shell_is_killed_at_its_cap_and_rss_stays_flat(
    sup: Supervisor, cmd: list[str]
) -> None:
    # Warm-up: the zygote and the first unit's machinery exist before we measure.
    assert sup.wait(sup.shell(["true"]).id, timeout=30).status == Status.COMPLETED
    before = peak = rss_bytes()

    unit = sup.shell(cmd, output_cap=CAP)
    pause = threading.Event()
    record = sup.get(unit.id)
    deadline = 60.0
    waited = 0.0
    while not is_terminal(record.status):
        peak = max(peak, rss_bytes())
        assert waited < deadline, f"{unit.id} still {record.status} after {deadline} s"
        pause.wait(0.01)
        waited += 0.01
        record = sup.get(unit.id)
    peak = max(peak, rss_bytes())

    assert record.status == Status.KILLED, record
    assert record.reason == Reason.OUTPUT_CAP, record
    assert record.output_bytes >= CAP
    assert len(record.output_tail) <= 64 * 1024
    assert record.output_path is None or not os.path.lexists(record.output_path)
    assert peak - before < 2 * MIB, f"supervisor RSS grew {(peak - before) / MIB:.1f} MiB"
    # Still serving.
    assert sup.wait(sup.shell(["true"]).id, timeout=30).status == Status.COMPLETED
