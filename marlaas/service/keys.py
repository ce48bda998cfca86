"""API keys: a new key is shown once; the store keeps only its keyed hash.

The hash is HMAC-SHA256 under the service's secret (``DATA/secret.key``, made on first use,
readable by its owner only): a copy of the database alone does not let anyone test guesses
of a key offline.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

SECRET_FILE = "secret.key"
KEY_PREFIX = "mlk_"
"""Every key starts with this (a key pasted into a chat or a log is easy to recognise)."""


def new_key() -> str:
    """A fresh API key (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(secret: bytes, key: str) -> str:
    """The keyed hash the store keeps of ``key`` (hex)."""
    return hmac.new(secret, key.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


class SecretError(RuntimeError):
    """The keys' secret is damaged, or missing while keys made with it exist (one line)."""


def load_secret(data_dir: Path, keys_made: int = 0, make: bool = True) -> bytes | None:
    """The service's secret in ``data_dir``, made (owner-only) on first use; ``make`` False
    (a command that only reads): None where there is none yet, nothing made. SecretError when
    it is damaged, or missing while ``keys_made`` tenants' keys were made with it: a new
    secret would refuse every one of them, 401 with no word of why."""
    path = Path(data_dir) / SECRET_FILE
    if keys_made and not path.exists():
        raise SecretError(
            f"{path}: missing, and the database holds {keys_made} tenant(s)' keys made with it: "
            "restore it from a backup of the data folder (if it is lost for good, put 32 "
            f"random bytes there, `head -c 32 /dev/urandom > {path}`, and give every tenant "
            "a new key: tenants revoke, then tenants add)"
        )
    if not make:
        return _read_secret(path, keys_made) if path.exists() else None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_secret(path, keys_made)
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(32))
        handle.flush()
        os.fsync(handle.fileno())
    return path.read_bytes()


SECRET_WRITE_S = 2.0
"""How long a reader waits for the secret another command has just made to be written [s]."""


def _read_secret(path: Path, keys_made: int) -> bytes:
    """The secret in ``path``, which exists: one shorter than 32 bytes is waited on for up to
    :data:`SECRET_WRITE_S`, as another command (``serve`` and a first ``tenants add`` at once)
    may have made it and not yet written it, and then is SecretError. A reader refused such a
    file at once: a first start beside another one failed, 'damaged; restore it'."""
    deadline = time.monotonic() + SECRET_WRITE_S
    while len(secret := path.read_bytes()) < 32:
        if time.monotonic() > deadline:
            hint = ("restore it" if keys_made else "no tenant's key was made with it: remove it "
                    "and start again")  # fmt: skip
            raise SecretError(f"{path}: damaged (shorter than 32 bytes); {hint}")
        time.sleep(0.05)
    return secret
