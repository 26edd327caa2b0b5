"""The receipt chain: canonical bytes, hashing and verification.

``hash = SHA-256(prev_hash || canonical bytes of the entry as stored)``. The changes are
hashed as their ciphertext, so the chain verifies without any decryption key.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass

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


@dataclass
class Break:
    org: str
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"org {self.org}: chain broken at seq {self.seq}: {self.reason}"


def verify_org(org) -> Break | None:
    """Walk one org's entries in sequence order; return the first broken link, if any."""
    from apps.issues.models import Activity

    expected_seq = 1
    prev = GENESIS
    rows = (
        Activity.objects.filter(org_id=org.pk)
        .order_by("seq")
        .values_list("seq", "issue_id", "principal_id", "key_id", "runtime", "verb", "created_at", "changes_enc", "prev_hash", "hash")
        .iterator(chunk_size=2000)
    )
    for seq, issue_id, principal_id, key_id, runtime, verb, created_at, changes_enc, prev_hash, stored_hash in rows:
        if seq != expected_seq:
            return Break(org.slug, expected_seq, f"expected seq {expected_seq}, found {seq} (an entry is missing or inserted)")
        if prev_hash != prev:
            return Break(org.slug, seq, "prevHash does not match the previous entry's hash (reordered or replaced)")
        payload = canonical(
            org_id=org.pk, seq=seq, issue_id=issue_id, principal_id=principal_id, key_id=key_id,
            runtime=runtime, verb=verb, created_at=created_at, changes_enc=changes_enc,
        )
        if link_hash(prev_hash, payload) != stored_hash:
            return Break(org.slug, seq, "hash does not match the entry's content (edited)")
        prev = stored_hash
        expected_seq += 1
    if expected_seq - 1 != org.activity_seq or prev != org.chain_head:
        return Break(org.slug, expected_seq, f"the chain ends at seq {expected_seq - 1} but the org's head is seq {org.activity_seq} (entries removed)")
    return None
