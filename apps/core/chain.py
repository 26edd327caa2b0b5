"""The receipt chain's links: canonical bytes, keyed hashing, and the signed head file.

``hash = HMAC-SHA-256(chain key, prev_hash || canonical bytes of the entry as stored)``
(SPEC §7). The changes are hashed as their ciphertext, so the chain verifies without any
org's data key. Walking an org's chain (``verify_org``) and folding receipts back into
issues live with the receipts, in apps.issues.chain.

The chain key. A deployment has one random *chain secret*, stored in the key store
(``<keystore>/chain.secret``) wrapped by the master key ring exactly like an org's data
key, so rotating the master key re-wraps it (``rewrap_keys``) and never changes a link.
Each org's chain key is ``HKDF-SHA256(chain secret, info="retasc:chain:v1:<org id>")``.
Someone who can write the database but cannot read the master key cannot compute a link,
so cannot rewrite the chain consistently. (Deriving straight from the newest master key
would tie every old link to a master key that rotation eventually drops.)

The head file. Removing the last entries and setting the org's head back leaves a chain
that is consistent in itself; so every commit also writes the org's head (seq and hash),
signed with its chain key, to ``<data dir>/heads/<org id>.head``, outside the database.
Verification requires the anchored entry to be in the chain. The file is written after
commit, only ever forward (a lock and a seq comparison), and without fsync: after an OS
crash it may lag behind the database, never run ahead of it.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from apps.core import keystore

GENESIS = "0" * 64
CHAIN_SECRET_FILE = "chain.secret"
_SECRET_REF = "chain"  # the AAD name of the wrapped chain secret (its file's stem)

_keys: dict[str, bytes] = {}
_lock = threading.Lock()


def canonical(*, org_id, seq, issue_id, principal_id, key_id, runtime, verb, created_at, changes_enc) -> bytes:
    doc = {
        "org": str(org_id),
        "seq": int(seq),
        "issue": str(issue_id) if issue_id else None,
        "principal": principal_id,
        "key": key_id,
        "runtime": runtime,
        "verb": verb,
        "at": created_at.isoformat(timespec="microseconds"),
        "changes": base64.b64encode(bytes(changes_enc)).decode(),
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def legacy_link_hash(prev_hash: str, payload: bytes) -> str:
    """The unkeyed link of chains written before the chain key (``relink_chains`` only)."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + payload).hexdigest()


def link_hash(key: bytes, prev_hash: str, payload: bytes) -> str:
    """One link. Raises ValueError when ``prev_hash`` is not hex (a damaged row)."""
    return hmac.new(key, bytes.fromhex(prev_hash) + payload, hashlib.sha256).hexdigest()


# --- the chain key ------------------------------------------------------------------------


def _secret_path() -> Path:
    return keystore.keystore_dir() / CHAIN_SECRET_FILE


def _chain_secret() -> bytes:
    """The deployment's chain secret, created once (under the key store's lock, so two
    processes starting together agree on one)."""
    path = _secret_path()
    try:
        wrapped = path.read_bytes()
    except FileNotFoundError:
        with keystore.store_lock():
            if not path.exists():
                keystore.write_atomic(path, keystore.ring().wrap(os.urandom(32), org_ref=_SECRET_REF))
            wrapped = path.read_bytes()
    return keystore.ring().unwrap(wrapped, org_ref=_SECRET_REF)


def chain_key(org_id) -> bytes:
    """The org's chain key (cached per process; deriving it costs one HKDF)."""
    ref = str(org_id)
    key = _keys.get(ref)
    if key is None:
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"retasc:chain:v1:" + ref.encode())
        key = hkdf.derive(_chain_secret())
        with _lock:
            _keys[ref] = key
    return key


def clear_cache() -> None:
    with _lock:
        _keys.clear()


# --- the signed head file ---------------------------------------------------------------


@dataclass(frozen=True)
class Anchor:
    seq: int
    hash: str


class AnchorError(Exception):
    """The head file exists but is unreadable or its signature does not match."""


def heads_dir() -> Path:
    path = Path(settings.DATA_DIR) / "heads"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _head_path(org_id) -> Path:
    return heads_dir() / f"{org_id}.head"


def _head_sig(org_id, seq: int, head: str) -> str:
    return hmac.new(chain_key(org_id), f"head:{org_id}:{int(seq)}:{head}".encode(), hashlib.sha256).hexdigest()


def read_anchor(org_id) -> Anchor | None:
    """The org's anchored head, or None when it has no head file yet."""
    try:
        raw = _head_path(org_id).read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        seq, head, sig = int(doc["seq"]), str(doc["hash"]), str(doc["sig"])
    except (ValueError, KeyError, TypeError):
        raise AnchorError("the head file is unreadable") from None
    if str(doc.get("org")) != str(org_id) or not hmac.compare_digest(sig, _head_sig(org_id, seq, head)):
        raise AnchorError("the head file's signature does not match")
    return Anchor(seq, head)


def write_anchor(org_id, seq: int, head: str) -> None:
    """Move the org's head file forward to (seq, head); never backward.

    Runs after commit: concurrent commits may arrive out of order, so the file is read
    and compared under an exclusive lock of its own.
    """
    path = _head_path(org_id)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            current = read_anchor(org_id)
        except AnchorError:
            current = None  # a damaged file is replaced; verification already flags it
        if current is not None and current.seq >= seq:
            return
        doc = {"org": str(org_id), "seq": int(seq), "hash": head, "sig": _head_sig(org_id, seq, head)}
        keystore.write_atomic(path, json.dumps(doc, sort_keys=True).encode(), sync=False)
    finally:
        os.close(fd)  # closing releases the lock
