"""Claim tokens: minting, hashing, and the fence every claim-bound write passes."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.db import connection

from apps.core import sql
from apps.core.errors import ServiceError
from apps.issues.models import Claim, Issue

TOKEN_PREFIX = "rtclm_"


def new_token() -> tuple[str, str]:
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return raw, token_hash(raw)


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def is_live(issue, now) -> bool:
    return issue.lease_claim_id is not None and issue.lease_expires_at is not None and issue.lease_expires_at > now


def holder_only(issue) -> ServiceError:
    return ServiceError(
        "CLAIM_MISMATCH",
        f"{issue.identifier} is held by another agent; only its holder can write to it.",
        reason="holder-only-writes",
        expiresAt=issue.lease_expires_at.isoformat() if issue.lease_expires_at else None,
    )


def claim_by_token(digest: str, issue_id):
    """``Claim.objects.filter(token_hash=digest, issue_id=issue_id).first()``, written out
    (apps.core.sql): every claim-bound write passes this fence."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {sql.columns(Claim, 'c')} FROM {Claim._meta.db_table} c WHERE c.token_hash = %s AND c.issue_id = %s",
            [digest, Issue._meta.pk.get_db_prep_value(issue_id, connection)],
        )
        row = cur.fetchone()
    return sql.load(Claim, row) if row is not None else None


def claim_fence(*, issue, actor, token: str | None, now, required: bool, rebinding: bool = False) -> Claim | None:
    """Return the live claim ``token`` proves on ``issue`` (the row must be locked).

    - token of a claim on this issue that is no longer the live one (superseded,
      expired, released): CLAIM_LOST;
    - the issue is held live and the caller shows no valid token of its own:
      CLAIM_MISMATCH (HTTP 403, holder-only-writes);
    - no token, the issue is not held, and the write needs a claim: CLAIM_REQUIRED.
    With ``required=False`` an unheld issue without a token passes (returns None).
    A live claim is bound to the key that holds it; only ``rebinding`` (the resume door,
    ``claim_issue`` with the token) accepts it from another key of the same principal.
    """
    live = is_live(issue, now)
    if token:
        digest = token_hash(token)
        # The live claim's row came with the locked issue row (issue_resolve(lock=True)):
        # when the token is its token, no statement is needed to find it.
        lease = issue.__dict__.get("_lease_claim")
        if lease is not None and hmac.compare_digest(lease.token_hash, digest):
            claim = lease
        else:
            claim = claim_by_token(digest, issue.pk)
        if claim is None or claim.principal_id != actor.principal_id:
            if live and actor.principal_id is not None and issue.lease_principal_id == actor.principal_id:
                # The caller holds it: their token is wrong, nobody else's claim is in the way.
                raise ServiceError(
                    "CLAIM_MISMATCH",
                    f"That claimToken is not the one for your claim on {issue.identifier}; "
                    "use the claimToken your claim answered with.",
                    reason="wrong-claim-token",
                )
            if live or required:
                raise (
                    holder_only(issue)
                    if live
                    else ServiceError(
                        "CLAIM_MISMATCH", "That claim token is not yours for this issue.", reason="holder-only-writes"
                    )
                )
            return None
        if claim.pk == issue.lease_claim_id and live and claim.ended_at is None:
            if rebinding or actor.key_id is None or claim.key_id == actor.key_id:
                return claim
            # The resume door moved this claim to another session key: the old session
            # is a superseded holder and its late writes must not land.
            raise ServiceError(
                "CLAIM_LOST",
                f"Your claim on {issue.identifier} was rebound to another session; use that session.",
                reclaimCount=issue.reclaim_count,
            )
        raise ServiceError(
            "CLAIM_LOST",
            f"Your claim on {issue.identifier} ended ({claim.end_reason or 'lease expired'}); claim it again to continue.",
            reclaimCount=issue.reclaim_count,
        )
    if live:
        raise holder_only(issue)
    if required:
        raise ServiceError("CLAIM_REQUIRED", f"Claim {issue.identifier} first (claim_issue), then pass its claimToken.")
    return None
