"""Envelope encryption for content at rest.

Layout:
- A deployment *master key ring* (``RETASC_MASTER_KEY``): comma-separated base64 keys of
  32 bytes, newest first. The newest wraps; any key in the ring unwraps, so rotation is
  "prepend a new key, run ``rewrap_keys``, later drop the old one".
- Each org has a random 256-bit *data key*, stored only wrapped by a master key.
- Content is sealed with AES-256-GCM under the org's data key. The associated data binds
  each ciphertext to its org, table, field and row: a ciphertext copied elsewhere fails
  authentication instead of decrypting.

Blob formats (bytes):
- wrapped data key: b"K1" | master key id (8 bytes) | nonce (12) | ciphertext+tag
- sealed content:   b"\\x01" | nonce (12) | ciphertext+tag

Nonces are 96 random bits per message (os.urandom); with far fewer than 2**32 messages
per key, the collision probability is negligible (NIST SP 800-38D, 8.3).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.core.exceptions import ImproperlyConfigured

KEY_BYTES = 32
NONCE_BYTES = 12
_WRAP_MAGIC = b"K1"
_SEAL_VERSION = b"\x01"


class CryptoConfigError(ImproperlyConfigured, ValueError):
    """The master key setting is unusable. The message is one sentence for the operator.

    An ``ImproperlyConfigured``, so ``manage.py`` and the ASGI entry point print it as one
    line and stop instead of showing a traceback.
    """


class IntegrityError(Exception):
    """A ciphertext failed authentication: tampered, truncated, moved, or the wrong key."""


def new_master_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"retasc-master-key-id:" + key).digest()[:8]


def _decode_key(text: str, position: int) -> bytes:
    cleaned = text.strip()
    try:
        raw = base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise CryptoConfigError(
            f"RETASC_MASTER_KEY entry {position} is not a base64 encoding of 32 bytes "
            '(generate one with: python -c "import base64,os;print(base64.urlsafe_b64encode(os.urandom(32)).decode())").'
        )
    return raw


class MasterKeyRing:
    """The ordered master keys; ``keys[0]`` is the newest."""

    def __init__(self, keys: list[bytes]):
        if not keys:
            raise CryptoConfigError("RETASC_MASTER_KEY is empty.")
        self.keys = keys
        self._by_id = {_key_id(k): k for k in keys}

    @classmethod
    def parse(cls, value: str) -> MasterKeyRing:
        parts = [p for p in (value or "").split(",") if p.strip()]
        return cls([_decode_key(p, i + 1) for i, p in enumerate(parts)])

    @property
    def newest_id(self) -> bytes:
        return _key_id(self.keys[0])

    def wrap(self, data_key: bytes, *, org_ref: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        aad = b"retasc:data-key:" + org_ref.encode()
        sealed = AESGCM(self.keys[0]).encrypt(nonce, data_key, aad)
        return _WRAP_MAGIC + self.newest_id + nonce + sealed

    def unwrap(self, wrapped: bytes, *, org_ref: str) -> bytes:
        wrapped = bytes(wrapped)
        if not wrapped.startswith(_WRAP_MAGIC) or len(wrapped) < 2 + 8 + NONCE_BYTES + 16:
            raise IntegrityError(f"the data key of org {org_ref} is malformed")
        key_id = wrapped[2:10]
        nonce = wrapped[10 : 10 + NONCE_BYTES]
        master = self._by_id.get(key_id)
        if master is None:
            raise CryptoConfigError(
                f"The data key of org {org_ref} was wrapped by a master key that is not in "
                "RETASC_MASTER_KEY; add the old key back to the ring (newest first)."
            )
        try:
            return AESGCM(master).decrypt(nonce, wrapped[10 + NONCE_BYTES :], b"retasc:data-key:" + org_ref.encode())
        except InvalidTag:
            raise IntegrityError(f"the data key of org {org_ref} failed authentication") from None

    def wrapped_by_newest(self, wrapped: bytes) -> bool:
        return bytes(wrapped)[2:10] == self.newest_id


def aad(org_ref: str, table: str, field: str, row_ref: str) -> bytes:
    """Associated data binding a ciphertext to one place."""
    return f"retasc:v1:{org_ref}:{table}:{field}:{row_ref}".encode()


def seal(data_key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return _SEAL_VERSION + nonce + AESGCM(data_key).encrypt(nonce, plaintext, associated)


def open_sealed(data_key: bytes, blob: bytes, associated: bytes, *, where: str) -> bytes:
    blob = bytes(blob)
    if len(blob) < 1 + NONCE_BYTES + 16 or blob[:1] != _SEAL_VERSION:
        raise IntegrityError(f"ciphertext of {where} is malformed")
    try:
        return AESGCM(data_key).decrypt(blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES :], associated)
    except InvalidTag:
        raise IntegrityError(f"ciphertext of {where} failed authentication (tampered or moved)") from None
