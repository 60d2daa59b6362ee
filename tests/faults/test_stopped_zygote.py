"""A kill lands while the zygote is held up (stopped, or busy forking).

The unit's actor SIGKILLs its process through the pidfd the supervisor holds,
then asks the zygote to kill the unit's group. The process dies at once; the
end is still recorded from the zygote's reap, once the zygote runs again.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

import cloudpickle
import pytest

import workunits as wu

from ..conftest import alive, eventually

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 30.0  # bounds waits that end at once unless something is broken


def wait_until_killed() -> None:
    threading.Event().wait()


@pytest.mark.parametrize("reuse", [False, True], ids=["agent", "pooled"])
def test_a_kill_lands_while_the_zygote_is_stopped(tmp_path: object, reuse: bool) -> None:
    with wu.Supervisor(f"{tmp_path}/state", install_signal_handlers=False) as sup:
        handle = sup.agent(wait_until_killed, reuse=reuse)
        pid = eventually(lambda: sup.get(handle.id).pid, what="the unit's pid")
        zygote = sup._machinery.zygote.pid
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


def test_a_signal_asked_on_the_reapers_thread_never_waits_there(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal may be asked of the zygote from the Reaper's thread. The send to the
    zygote may wait (its socket full while it writes to us, and only the Reaper reads
    it): that wait must be another thread's, or nothing is read any more."""
    with wu.Supervisor(f"{tmp_path}/state", install_signal_handlers=False) as sup:
        handle = sup.agent(wait_until_killed)
        eventually(lambda: sup.get(handle.id).pid, what="the unit's pid")
        runtime = sup._machinery
        sending, release = threading.Event(), threading.Event()
        send = runtime.zygote._send_signal

        def full_socket(*args: object) -> None:  # stands in for a send the kernel holds
            sending.set()
            release.wait(30)
            send(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(runtime.zygote, "_send_signal", full_socket)
        asked = threading.Event()

        def on_data(data: bytes, fds: list[int]) -> None:  # on the Reaper's thread
            runtime.zygote.signal(handle.id, signal.SIGKILL)
            asked.set()

        ours, theirs = socket.socketpair()
        try:
            runtime.reaper.watch_stream(ours, on_data, lambda: None)
            theirs.sendall(b"x")
            assert sending.wait(WAIT)
            assert asked.wait(WAIT), "the Reaper's thread waited on the send"
            release.set()
            record = sup.wait(handle.id, timeout=WAIT)
            assert record.signal == signal.SIGKILL
        finally:
            release.set()
            ours.close()
            theirs.close()
