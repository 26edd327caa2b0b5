"""Per-org data keys: created, unwrapped (cached), re-wrapped and destroyed.

Wrapped data keys live in a key store *outside the database* (``RETASC_KEYSTORE_DIR``,
default ``<data dir>/keys``), one file per org. Destroying an org's key file therefore
makes its content unrecoverable even from a database backup taken earlier
(crypto-shredding). Back up the key store and the master key apart from the database.
"""

from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from apps.core import crypto

_cache: dict[str, bytes] = {}
_lock = threading.Lock()
_CANARY_TEXT = b"retasc master key canary"


@lru_cache(maxsize=4)
def _ring_for(value: str) -> crypto.MasterKeyRing:
    return crypto.MasterKeyRing.parse(value)


def ring() -> crypto.MasterKeyRing:
    return _ring_for(settings.RETASC_MASTER_KEY)


def keystore_dir() -> Path:
    path = Path(getattr(settings, "RETASC_KEYSTORE_DIR", "") or Path(settings.DATA_DIR) / "keys")
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _path(org_ref: str) -> Path:
    return keystore_dir() / f"{org_ref}.key"


def write_atomic(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write ``path`` whole or not at all (0600). ``sync=False`` skips the fsync, for
    files that may lag after an OS crash but must never be torn (the chain's head)."""
    tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


@contextmanager
def store_lock():
    """An exclusive lock on the key store, across processes: a rewrap must never write
    back the key of an org that is being destroyed at the same moment (that would undo
    the crypto-shredding)."""
    fd = os.open(keystore_dir() / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def data_key_create(org_ref: str) -> None:
    """Create and store a fresh data key for a new org."""
    key = crypto.new_data_key()
    write_atomic(_path(org_ref), ring().wrap(key, org_ref=org_ref))
    with _lock:
        _cache[org_ref] = key


def data_key(org_ref: str) -> bytes:
    key = _cache.get(org_ref)
    if key is not None:
        return key
    try:
        wrapped = _path(org_ref).read_bytes()
    except FileNotFoundError:
        raise crypto.IntegrityError(f"org {org_ref} has no data key (it was deleted, or the key store is missing)") from None
    key = ring().unwrap(wrapped, org_ref=org_ref)
    with _lock:
        _cache[org_ref] = key
    return key


def data_key_destroy(org_ref: str) -> None:
    """Crypto-shred: forget the key everywhere this process can reach."""
    with _lock:
        _cache.pop(org_ref, None)
    with store_lock():
        try:
            _path(org_ref).unlink()
        except FileNotFoundError:
            pass


def rewrap_all() -> tuple[int, int]:
    """Re-wrap every stored data key, and the receipt chain's secret (apps.core.chain),
    under the newest master key. Returns (rewrapped, total)."""
    current = ring()
    done = total = 0
    paths = sorted(keystore_dir().glob("*.key"))
    if (keystore_dir() / "chain.secret").exists():
        paths.append(keystore_dir() / "chain.secret")  # wrapped with the AAD name "chain"
    for path in paths:
        with store_lock():
            try:
                wrapped = path.read_bytes()
            except FileNotFoundError:  # the org was deleted meanwhile: stay shredded
                continue
            total += 1
            if current.wrapped_by_newest(wrapped):
                continue
            org_ref = path.stem
            write_atomic(path, current.wrap(current.unwrap(wrapped, org_ref=org_ref), org_ref=org_ref))
            done += 1
    return done, total


def check_master_key() -> None:
    """Stop start-up when the master key ring cannot open what this deployment wrote.

    A canary sealed by the first master key ever used is kept in the key store; every
    key that ever became newest re-seals it, so any correct ring opens it.
    """
    current = ring()
    canary = keystore_dir() / "canary"
    if not canary.exists():
        write_atomic(canary, current.wrap(_CANARY_TEXT, org_ref="canary"))
        return
    try:
        current.unwrap(canary.read_bytes(), org_ref="canary")
    except (crypto.CryptoConfigError, crypto.IntegrityError):
        raise crypto.CryptoConfigError(
            "RETASC_MASTER_KEY does not match the key that encrypted this deployment's data; "
            "set it back to the original key (or put that key after the new one)."
        ) from None
    if not current.wrapped_by_newest(canary.read_bytes()):
        write_atomic(canary, current.wrap(_CANARY_TEXT, org_ref="canary"))


def clear_cache() -> None:
    with _lock:
        _cache.clear()
