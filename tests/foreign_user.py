"""Another local user, for tests of what a second user can do to a state dir.

Tests run as root (here and in CI). ``as_user`` forks, drops the child to an
unprivileged user (``nobody``) and runs a function there; everything the
function needs is already imported in the parent, so the child reads no file
of the checkout. ``shared_dir`` is a sticky, world-writable directory like
``/tmp``, where such a user can plant things.
"""

from __future__ import annotations

import codecs
import os
import pickle
import pwd
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CODECS = ("ascii", "latin-1", "utf-8")


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


@pytest.fixture
def nobody() -> User:
    """The unprivileged ``nobody`` user; skips when this process cannot become it."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to act as a second local user (nobody) in a child process")
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no 'nobody' user to act as a second local user")
    return User(entry.pw_name, entry.pw_uid, entry.pw_gid)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A fresh sticky, world-writable directory in the system's temp dir (like /tmp itself).

    Not under pytest's tmp_path: that one is private to root, so another user
    could not reach it.
    """
    path = Path(tempfile.mkdtemp(prefix="workunits-shared-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class ChildFailed(AssertionError):
    """The function raised in the child; the message is its traceback."""


def as_user(user: User, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` run in a forked child as ``user``; its return value (pickled back).

    An exception in the child comes back as ChildFailed carrying its traceback.
    """
    # Codecs load on first use, from the standard library, which this user may not
    # be able to read: look up every one the runtime names, before the fork.
    for name in CODECS:
        codecs.lookup(name)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges for good, then run
        code = 1
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            try:
                answer: tuple[bool, Any] = (True, fn(*args))
            except BaseException:  # noqa: BLE001 - reported to the parent, which raises
                answer = (False, traceback.format_exc())
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(answer, pipe)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the child as {user.name} died"
    assert data, f"the child as {user.name} said nothing"
    ok, value = pickle.loads(data)  # noqa: S301 - our own child's answer
    if not ok:
        raise ChildFailed(value)
    return value


def give(path: Path, user: User) -> None:
    """Make ``path`` and everything under it belong to ``user``."""
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), user.uid, user.gid)
    os.lchown(path, user.uid, user.gid)
