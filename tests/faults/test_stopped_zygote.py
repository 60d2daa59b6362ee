"""A kill lands while the zygote is held up (stopped, or busy forking).

The unit's actor SIGKILLs its process through the pidfd the supervisor holds,
then asks the zygote to kill the unit's group. The process dies at once; the
end is still recorded from the zygote's reap, once the zygote runs again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import cloudpickle

import workunits as wu

from ..conftest import alive, eventually

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def wait_until_killed() -> None:
    threading.Event().wait()


def test_a_kill_lands_while_the_zygote_is_stopped(tmp_path: object) -> None:
    with wu.Supervisor(f"{tmp_path}/state", install_signal_handlers=False) as sup:
        handle = sup.agent(wait_until_killed)
        pid = eventually(lambda: sup.get(handle.id).pid, what="the unit's pid")
        zygote = sup._runtime.zygote.pid
        assert zygote is not None
        os.kill(zygote, signal.SIGSTOP)
        try:
            assert sup.kill(handle.id) is True
            # Before: the kill waited in the stopped zygote's socket, so the unit ran on.
            eventually(lambda: not alive(pid), timeout=20, what="the unit to die")
        finally:
            os.kill(zygote, signal.SIGCONT)
        record = sup.wait(handle.id, timeout=30)
        assert (record.status, record.reason, record.signal) == (
            wu.Status.KILLED,
            wu.Reason.KILLED,
            signal.SIGKILL,
        )


def test_a_cancel_that_escalates_kills_at_once_too(tmp_path: object) -> None:
    """A cancel's SIGKILL at the end of its grace takes the same path as a kill."""
    with wu.Supervisor(f"{tmp_path}/state", install_signal_handlers=False) as sup:
        handle = sup.shell(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"])
        pid = eventually(lambda: sup.get(handle.id).pid, what="the unit's pid")
        assert sup.cancel(handle.id, grace=0.2) is True
        record = sup.wait(handle.id, timeout=30)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
        eventually(lambda: not alive(pid), timeout=20, what="the command to die")
