"""The shared secret: one file every host of a cluster is given, never the database.

Supervisors and clients on one PostgreSQL ledger have state dirs of their
own, so the per-state-dir key (``values.KEY_FILE``) and HTTP token
(``http.token``) differ between them: a spec one signs, another refuses. A
secret file (``secret_file=``, ``--secret-file``, or ``WORKUNITS_SECRET_FILE``)
holds one secret they share, from which both are derived, each under its own
label (HMAC-SHA256), so the token sent over the network never reveals the
signing key:

- the key that signs stored specs, results and checkpoints (``spec_key``);
- the bearer token of every ``serve --http`` and of the clients that call
  another host's API (``token``).

When given, the file takes precedence over the state dir's key and token.
It is refused (``SecretFileError``) when group or others may read or write
it, when another user (root aside) owns it, or when it holds fewer than
``MIN_SECRET`` bytes. Make one with::

    python -c 'import secrets; print(secrets.token_urlsafe(32))' > secret
    chmod 600 secret
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from workunits._core.errors import SecretFileError

ENV = "WORKUNITS_SECRET_FILE"
MIN_SECRET = 16


@dataclass(frozen=True, slots=True)
class SharedSecret:
    path: Path
    spec_key: bytes = field(repr=False)
    token: str = field(repr=False)

    @property
    def key_id(self) -> str:
        """A short public name for the key, for messages that must not show it."""
        return hashlib.sha256(self.spec_key).hexdigest()[:12]


def resolve(secret_file: str | os.PathLike[str] | None) -> SharedSecret | None:
    """The secret named by ``secret_file``, else by ``WORKUNITS_SECRET_FILE``; None if neither."""
    if secret_file is None:
        secret_file = os.environ.get(ENV) or None
    return None if secret_file is None else load(Path(secret_file))


def load(path: Path) -> SharedSecret:
    """Read and check ``path``; SecretFileError says what is wrong and what to do."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SecretFileError(
            f"cannot read the secret file {path}: {exc.strerror}; check --secret-file (or {ENV})"
        ) from None
    try:
        info = os.fstat(fd)
        _check(path, info)
        secret = os.read(fd, 1 << 16).strip()
    finally:
        os.close(fd)
    if len(secret) < MIN_SECRET:
        raise SecretFileError(
            f"the secret file {path} holds {len(secret)} bytes; it needs at least {MIN_SECRET} "
            f"(python -c 'import secrets; print(secrets.token_urlsafe(32))' makes one)"
        )
    return SharedSecret(
        path=path,
        spec_key=_derive(secret, b"workunits/spec-key"),
        token=_derive(secret, b"workunits/http-token").hex(),
    )


def _check(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SecretFileError(f"the secret file {path} is not a regular file")
    if info.st_mode & 0o077:
        raise SecretFileError(
            f"the secret file {path} is open to group or others (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); it guards every host's specs and API: "
            f"chmod 600 {path}"
        )
    if info.st_uid not in (os.geteuid(), 0):
        raise SecretFileError(
            f"the secret file {path} belongs to another user (uid {info.st_uid}); use a file "
            f"of your own, mode 600"
        )


def _derive(secret: bytes, label: bytes) -> bytes:
    return hmac.new(secret, label, hashlib.sha256).digest()
