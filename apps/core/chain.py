"""The receipt chain's links: canonical bytes and hashing.

``hash = SHA-256(prev_hash || canonical bytes of the entry as stored)``. The changes are
hashed as their ciphertext, so the chain verifies without any decryption key. Walking an
org's chain (``verify_org``) and folding receipts back into issues live with the receipts,
in apps.issues.chain.
"""

from __future__ import annotations

import base64
import hashlib
import json

GENESIS = "0" * 64


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


def link_hash(prev_hash: str, payload: bytes) -> str:
    return hashlib.sha256(bytes.fromhex(prev_hash) + payload).hexdigest()
