"""OAuth 2.1 for MCP clients that cannot paste a header (SPEC §5): the rules, once.

The protocol (metadata, registration, the authorize request's checks, PKCE at the token
endpoint, client authentication) is the ``mcp`` SDK's (``apps.mcp.oauth`` adapts it);
this module holds what Retasc decides:

- a registered client is a row; its secret is derived, never stored;
- the authorize request travels to the Dash's consent page signed (10 minutes), so
  nothing is written until a signed-in human approves it there and picks org and project;
- an approval writes a single-use code (10 minutes) bound to the PKCE challenge;
- the code buys an **agent key of that human** (runtime from the client's name), issued
  with an expiry as the access token, plus a refresh token (stored hashed). The key is an
  ordinary agent key: bearer authentication, the keys page and revocation treat it like
  any other;
- a refresh rotates both the key's secret (same key row) and the refresh token; a
  revoked key ends the grant.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta
from urllib.parse import urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.core.errors import ServiceError, invalid
from apps.orgs.models import AgentKey, Membership, OAuthClient, OAuthCode, OAuthGrant, Org, Project
from apps.orgs.services import KEY_PREFIX, KNOWN_RUNTIMES, agent_key_mint, hash_secret

ACCESS_TTL = timedelta(hours=1)
CODE_TTL = timedelta(minutes=10)
CONSENT_MAX_AGE = 600
_CONSENT_SALT = "retasc.oauth-consent"
REFRESH_PREFIX = "rtscrf_"


def client_secret(client_id: str) -> str:
    """A confidential client's secret: HMAC of its id under the deployment's secret key."""
    return hmac.new(settings.SECRET_KEY.encode(), f"oauth-client:{client_id}".encode(), hashlib.sha256).hexdigest()


def client_register(*, client_id: str, name: str, redirect_uris: list[str], metadata: dict) -> OAuthClient:
    metadata = {k: v for k, v in metadata.items() if k not in ("client_secret",)}
    return OAuthClient.objects.create(
        client_id=client_id, name=(name or "MCP client").strip()[:200], redirect_uris=list(redirect_uris), metadata=metadata
    )


def client_get(client_id: str) -> OAuthClient | None:
    return OAuthClient.objects.filter(client_id=str(client_id)[:64]).first()


def runtime_for(client_name: str) -> str:
    """The runtime an OAuth client's key names: a known runtime its name mentions, else its name."""
    lowered = (client_name or "").lower()
    for known in KNOWN_RUNTIMES:
        if known in lowered or known.replace("-", " ") in lowered:
            return known
    slug = re.sub(r"[^a-z0-9._-]", "", slugify(client_name or ""))[:40].strip("-._")
    return slug or "oauth"


# --- the consent step (the Dash) ----------------------------------------------------------


def consent_request_sign(request: dict) -> str:
    """The authorize request, signed for the consent page (nothing is stored yet)."""
    return signing.dumps(request, salt=_CONSENT_SALT, compress=True)


def consent_request_load(signed: str) -> dict:
    try:
        request = signing.loads(signed or "", salt=_CONSENT_SALT, max_age=CONSENT_MAX_AGE)
    except signing.BadSignature:
        raise ServiceError(
            "NOT_FOUND", "This authorization request is unknown or expired; start again from the client."
        ) from None
    client = client_get(request.get("client_id", ""))
    if client is None or request.get("redirect_uri") not in client.redirect_uris:
        raise ServiceError("NOT_FOUND", "This authorization request is unknown or expired; start again from the client.")
    return {**request, "client": client}


def consent_choices(*, user) -> list[dict]:
    """The orgs (with their projects) the human may hand to a client."""
    memberships = Membership.objects.filter(user=user, status=Membership.Status.ACTIVE, org__deleted_at__isnull=True)
    out = []
    for membership in memberships.select_related("org").order_by("org__name"):
        projects = list(Project.objects.filter(org=membership.org).order_by("prefix"))
        if projects:
            out.append({"org": membership.org, "projects": projects})
    return out


def _redirect(uri: str, params: dict) -> str:
    parts = urlsplit(uri)
    query = parts.query + ("&" if parts.query else "") + urlencode({k: v for k, v in params.items() if v is not None})
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def consent_deny(*, request: dict) -> str:
    return _redirect(request["redirect_uri"], {"error": "access_denied", "state": request.get("state")})


def consent_approve(*, user, request: dict, org_id, project_id) -> str:
    """Write the single-use code for the human's choice; answer the client's redirect URL."""
    org = Org.objects.filter(pk=org_id, deleted_at__isnull=True).first() if org_id else None
    if org is None or not Membership.objects.filter(org=org, user=user, status=Membership.Status.ACTIVE).exists():
        raise invalid("org", "Pick one of your orgs.")
    project = Project.objects.filter(org=org, pk=project_id).first() if str(project_id or "").isdigit() else None
    if project is None:
        raise invalid("project", "Pick a project of that org.")
    raw = secrets.token_urlsafe(32)
    OAuthCode.objects.create(
        code_hash=hash_secret(raw),
        client=request["client"],
        user=user,
        org=org,
        project=project,
        code_challenge=request["code_challenge"],
        redirect_uri=request["redirect_uri"],
        redirect_uri_explicit=bool(request.get("redirect_uri_provided_explicitly", True)),
        scopes=list(request.get("scopes") or []),
        resource=request.get("resource") or "",
        expires_at=timezone.now() + CODE_TTL,
    )
    return _redirect(request["redirect_uri"], {"code": raw, "state": request.get("state"), "iss": settings.PUBLIC_URL})


# --- the token endpoint ---------------------------------------------------------------------


def code_load(*, client_id: str, raw: str) -> OAuthCode | None:
    """An unused, unexpired code issued to this client."""
    return (
        OAuthCode.objects.select_related("client")
        .filter(
            code_hash=hash_secret(raw or ""), client__client_id=client_id, used_at__isnull=True, expires_at__gt=timezone.now()
        )
        .first()
    )


def _issue(*, key: AgentKey, now) -> tuple[str, str]:
    """New secrets for ``key`` (the access token) and a new refresh token."""
    ident = key.prefix[len(KEY_PREFIX) :]
    access = f"{KEY_PREFIX}{ident}_{secrets.token_urlsafe(32)}"
    refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
    AgentKey.objects.filter(pk=key.pk).update(secret_hash=hash_secret(access), expires_at=now + ACCESS_TTL)
    return access, refresh


def code_exchange(*, code: OAuthCode) -> dict:
    """Spend the code once: mint the human's agent key and the grant. Answers the token fields."""
    now = timezone.now()
    with transaction.atomic():
        # Single use: of two exchanges of one code exactly one wins.
        if OAuthCode.objects.filter(pk=code.pk, used_at__isnull=True, expires_at__gt=now).update(used_at=now) != 1:
            raise ServiceError("INVALID_ARGUMENT", "The authorization code was already used or expired.")
        user = code.user
        key, _ = agent_key_mint(
            org=code.org,
            user=user,
            project=code.project,
            runtime=runtime_for(code.client.name),
            label=f"OAuth: {code.client.name}",
        )
        access, refresh = _issue(key=key, now=now)
        OAuthGrant.objects.create(
            client=code.client, key=key, refresh_hash=hash_secret(refresh), scopes=code.scopes, resource=code.resource
        )
    return _tokens(access, refresh, code.scopes)


def _tokens(access: str, refresh: str, scopes: list) -> dict:
    return {
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": int(ACCESS_TTL.total_seconds()),
        "refresh_token": refresh,
        "scope": " ".join(scopes) or None,
    }


def grant_for_refresh(*, client_id: str, raw: str) -> OAuthGrant | None:
    """The live grant this refresh token belongs to (its key not revoked)."""
    return (
        OAuthGrant.objects.select_related("client", "key")
        .filter(refresh_hash=hash_secret(raw or ""), client__client_id=client_id, key__revoked_at__isnull=True)
        .first()
    )


def refresh_exchange(*, grant: OAuthGrant, raw: str) -> dict:
    """Rotate the access token (same key row) and the refresh token; the old ones stop working."""
    now = timezone.now()
    with transaction.atomic():
        refresh_hash = hash_secret(raw)
        live = OAuthGrant.objects.filter(pk=grant.pk, refresh_hash=refresh_hash, key__revoked_at__isnull=True)
        access, refresh = _issue(key=grant.key, now=now)
        if live.update(refresh_hash=hash_secret(refresh), refreshed_at=now) != 1:
            transaction.set_rollback(True)
            raise ServiceError("INVALID_ARGUMENT", "The refresh token was already used or revoked.")
    return _tokens(access, refresh, grant.scopes)


def key_for_token(raw: str) -> AgentKey | None:
    """The key an access token or a refresh token stands for (for revocation)."""
    if not raw:
        return None
    if raw.startswith(REFRESH_PREFIX):
        grant = OAuthGrant.objects.select_related("key__org").filter(refresh_hash=hash_secret(raw)).first()
        return grant.key if grant else None
    return AgentKey.objects.select_related("org").filter(secret_hash=hash_secret(raw), oauth_grant__isnull=False).first()
