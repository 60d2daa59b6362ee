"""Durable values: unit specs and results as the ledger stores them.

A spec is stored in the first of these forms that fits:

``ref``     ``{"ref": "module:qualname", "args": [...], "kwargs": {...}}`` for a
            :class:`Call` whose callable resolves back, by import, to the very
            same object and whose arguments are exact JSON. A later attempt, or
            a newer version of the code, can load it.
``json``    any other spec that is exact JSON (a shell command, say).
``pickle``  cloudpickle bytes, for what has no reference (a lambda, a closure).
            They are tied to the Python, cloudpickle and workunits versions
            that wrote them, and refused under others.

Every stored spec carries an HMAC-SHA256 under the state dir's own key, bound
to the unit ID, and is verified before anything in it is resolved or
unpickled: a ``ref`` row is as able to run code (``os:system``) as a pickle
is, so both are signed. A pickled result or cause is signed the same way; JSON
results and checkpoints run nothing and are not.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import hmac
import importlib.metadata
import os
import secrets
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import cloudpickle

from workunits._core.errors import (
    REPAIR,
    LedgerCorrupt,
    LedgerError,
    LedgerFull,
    LedgerTampered,
    SpecError,
    ValueVersionMismatch,
)
from workunits._util import strictjson
from workunits._wire import unpickle
from workunits._wire.specs import Call, checked_ref, import_ref, resolve_ref

KEY_FILE = "secret.key"
KEY_BYTES = 32

SpecFormat = Literal["ref", "json", "pickle"]
ResultFormat = Literal["json", "pickle"]


@dataclass(frozen=True, slots=True)
class Stored:
    """A value as the ledger's columns hold it: ``<name>``, ``_format``, ``_mac``, ``_versions``."""

    format: str
    data: bytes
    mac: bytes | None = None
    versions: str | None = None  # only for pickles
    # A value store reference (valuestore.name_of) when the bytes live there; ``data``
    # is then empty until the Ledger loads them.
    file: str | None = None


@functools.cache
def versions() -> str:
    """The versions a pickle is tied to: Python (major.minor), cloudpickle, workunits."""
    try:
        ours = importlib.metadata.version("workunits")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        ours = "unknown"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"python {python}; cloudpickle {cloudpickle.__version__}; workunits {ours}"


# -- the per-state-dir key ------------------------------------------------------


def load_or_create_key(state_dir: Path) -> bytes:
    """Return ``<state_dir>/secret.key``, creating it (32 random bytes, 0400) on first use.

    The key is written to a private temporary file and published with
    ``link()``, which fails if the name exists: a concurrent opener either wins
    or reads the winner's complete key, never a half-written one.
    """
    path = state_dir / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    tmp = state_dir / f".{KEY_FILE}.{secrets.token_hex(8)}"
    try:
        _publish_key(tmp, path)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise LedgerFull(
                f"the disk holding the state dir ({state_dir}) is full; no key could be "
                f"written and nothing was stored. Free space there and retry"
            ) from exc
        raise
    return _read_key(path)


def load_key(state_dir: Path) -> bytes | None:
    """``<state_dir>/secret.key`` when it exists (None otherwise); never creates it."""
    try:
        return _read_key(state_dir / KEY_FILE)
    except FileNotFoundError:
        return None


def _publish_key(tmp: Path, path: Path) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o400)  # read-only from the start; this fd may still write
    try:
        try:
            if os.write(fd, secrets.token_bytes(KEY_BYTES)) != KEY_BYTES:
                raise OSError(errno.ENOSPC, "short write of the key")
            os.fsync(fd)
        finally:
            os.close(fd)
        # FileExistsError: another process published its key first; all use that one.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _read_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        # A key read through a link could be anyone's: refused, as the state dir's
        # other files are, with what to do rather than "too many levels of links".
        raise LedgerError(
            f"{path} is a symlink, and the key that signs this ledger is never read "
            f"through one; put the key file itself there (or remove the link)"
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise LedgerError(f"{path} is not a regular file owned by this user; remove it")
        if info.st_mode & 0o077:
            raise LedgerError(
                f"{path} is readable by other users (mode {stat.S_IMODE(info.st_mode):o}), so "
                f"it no longer protects the ledger; run chmod 400 on it"
            )
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise LedgerCorrupt(f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte key")
    return key


def mac_of(
    key: bytes, *, purpose: str, work_id: str, fmt: str, versions: str | None, data: bytes
) -> bytes:
    """HMAC-SHA256 over everything a reader will act on, bound to one unit and purpose."""
    header = "\0".join((purpose, work_id, fmt, versions or "")).encode()
    return hmac.new(key, header + b"\0" + data, hashlib.sha256).digest()


# -- import references ----------------------------------------------------------


# -- specs ----------------------------------------------------------------------


def encode_spec(spec: object, *, work_id: str, key: bytes) -> Stored:
    """Store ``spec`` as ``ref``, ``json`` or ``pickle`` (the first that fits), signed."""
    fmt: SpecFormat
    version_tag: str | None = None
    data: bytes | None = None
    if isinstance(spec, Call):
        ref = checked_ref(spec.fn) if isinstance(spec.fn, str) else import_ref(spec.fn)
        if ref is not None:
            doc = {"ref": ref, "args": list(spec.args), "kwargs": dict(spec.kwargs)}
            if spec.options:
                doc["options"] = dict(spec.options)
            if isinstance(spec.fn, str):  # no pickle to fall back on: refuse by name
                data = strictjson.dumps_argument(
                    doc,
                    f"the arguments for {ref!r}",
                    sort_keys=True,
                    hint=" (a callable given by reference takes only exact JSON arguments: "
                    "ones JSON brings back equal)",
                )
            else:
                data = strictjson.dumps_if_exact(doc, sort_keys=True)
            fmt = "ref"
    else:
        data, fmt = strictjson.dumps_if_exact(spec, sort_keys=True), "json"
    if data is None:  # no reference, or arguments JSON would not bring back equal
        fmt = "pickle"
        version_tag = versions()
        data = _pickle(spec, f"spec of {work_id}")
    mac = mac_of(key, purpose="spec", work_id=work_id, fmt=fmt, versions=version_tag, data=data)
    return Stored(fmt, data, mac, version_tag)


def decode_spec(stored: Stored, *, work_id: str, key: bytes) -> object:
    """Verify, then load a spec: a :class:`Call` for ``ref``, else what was stored.

    Raises LedgerTampered before resolving or unpickling anything that fails
    its HMAC, and ValueVersionMismatch for a pickle from other versions.
    """
    _verify(stored, "spec", work_id, key)
    if stored.format == "ref":
        doc = strictjson.loads(stored.data, work_id, "spec")
        fn = resolve_ref(doc["ref"])
        if not callable(fn):
            raise SpecError(f"{work_id}: {doc['ref']!r} is not callable")
        return Call(fn, tuple(doc["args"]), doc["kwargs"], doc.get("options", {}))
    if stored.format == "json":
        return strictjson.loads(stored.data, work_id, "spec")
    if stored.format == "pickle":
        return _unpickle(stored, work_id, "spec")
    raise LedgerCorrupt(f"unit {work_id}: column spec_format holds {stored.format!r}{REPAIR}")


def spec_hash(kind: str, stored: Stored, extra: bytes = b"") -> str:
    """A stable hash of what a submit asks for, to compare idempotent resubmits.

    ``ref`` and ``json`` data is canonical (sorted keys), so equal specs hash
    equal in any process. A pickle hashes its bytes: equal closures pickled by
    different code may differ, and then a resubmit with the same key conflicts
    rather than risking a wrong match.
    """
    digest = hashlib.sha256()
    for part in (b"workunits-spec/1", kind.encode(), stored.format.encode(), stored.data):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    if extra:  # what else was asked for (a sandbox policy); absent before it existed
        digest.update(len(extra).to_bytes(8, "big"))
        digest.update(extra)
    return digest.hexdigest()


# -- results --------------------------------------------------------------------


def encode_result(value: object, *, work_id: str, key: bytes, json_only: bool = False) -> Stored:
    """Store a result as exact JSON when it is, else as a signed pickle.

    ``json_only`` refuses (UnstorableValue, naming the path) what JSON would
    not bring back equal, instead of pickling it.
    """
    if json_only:
        return signed_json(strictjson.dumps(value, f"result of {work_id}"), "result", work_id, key)
    data = strictjson.dumps_if_exact(value)
    if data is not None:
        return signed_json(data, "result", work_id, key)
    tag = versions()
    data = _pickle(value, f"result of {work_id}")
    mac = mac_of(key, purpose="result", work_id=work_id, fmt="pickle", versions=tag, data=data)
    return Stored("pickle", data, mac, tag)


def decode_result(stored: Stored, *, work_id: str, key: bytes) -> Any:
    if stored.format == "json":
        verify(stored, purpose="result", work_id=work_id, key=key)
        return strictjson.loads(stored.data, work_id, "result")
    if stored.format == "pickle":
        _verify(stored, "result", work_id, key)
        return _unpickle(stored, work_id, "result")
    raise LedgerCorrupt(f"unit {work_id}: column result_format holds {stored.format!r}{REPAIR}")


def seal(data: bytes, fmt: str, *, purpose: str, work_id: str, key: bytes) -> Stored:
    """Store bytes someone else encoded (a unit's result or cause) with this ledger's seal.

    A pickle is signed and tagged with the versions of this process, which
    runs the same installation as the unit that pickled it; JSON runs
    nothing and is stored as it is.
    """
    if fmt == "json":
        return signed_json(data, purpose, work_id, key)
    if fmt != "pickle":
        raise SpecError(f"{work_id}: {purpose} format {fmt!r} is neither 'json' nor 'pickle'")
    tag = versions()
    mac = mac_of(key, purpose=purpose, work_id=work_id, fmt=fmt, versions=tag, data=data)
    return Stored("pickle", data, mac, tag)


def verify(stored: Stored, *, purpose: str, work_id: str, key: bytes) -> None:
    """Raise LedgerTampered unless the value's HMAC verifies.

    JSON runs no code, but what it says is acted on (a result handed to a
    caller, a checkpoint a later attempt resumes from), so it is signed too.
    JSON stored before it was signed has no HMAC, and passes.
    """
    if stored.format != "json" or stored.mac is not None:
        _verify(stored, purpose, work_id, key)


def signed_json(data: bytes, purpose: str, work_id: str, key: bytes) -> Stored:
    """JSON bytes with the HMAC that binds them to this unit and purpose."""
    mac = mac_of(key, purpose=purpose, work_id=work_id, fmt="json", versions=None, data=data)
    return Stored("json", data, mac)


# -- helpers --------------------------------------------------------------------


def _pickle(value: object, what: str) -> bytes:
    try:
        data: bytes = cloudpickle.dumps(value)
    except Exception as exc:  # pickling runs arbitrary __reduce__ code
        raise SpecError(f"{what} cannot be pickled: {exc!r}") from exc
    return data


def _verify(stored: Stored, purpose: str, work_id: str, key: bytes) -> None:
    expected = mac_of(
        key,
        purpose=purpose,
        work_id=work_id,
        fmt=stored.format,
        versions=stored.versions,
        data=stored.data,
    )
    if stored.mac is None or not hmac.compare_digest(expected, stored.mac):
        raise LedgerTampered(
            f"unit {work_id}: the stored {purpose} fails its integrity check (HMAC); it was "
            f"changed outside workunits or signed with another state dir's key, and was not used. "
            f"Hosts sharing one ledger must share one key: give each supervisor and client the "
            f"same secret file (--secret-file, WORKUNITS_SECRET_FILE)"
        )


def _unpickle(stored: Stored, work_id: str, what: str) -> Any:
    # Called only after _verify: these bytes are the ones this state dir wrote.
    if stored.versions != versions():
        raise ValueVersionMismatch(
            f"unit {work_id}: its {what} was pickled under {stored.versions}, and this process "
            f"runs {versions()}; pickled code only loads under the versions that wrote it. "
            f"Run it with those versions, or resubmit it with an importable function "
            f"('module:qualname') so that it is stored as a reference"
        )
    return unpickle.load(stored.data, work_id, what)  # HMAC-verified bytes
