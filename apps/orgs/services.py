"""Orgs, members, projects and agent keys (writes)."""

from __future__ import annotations

import hashlib
import re
import secrets
import zoneinfo
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.core import keystore
from apps.core.actor import Actor
from apps.core.errors import ServiceError, invalid, not_found
from apps.core.unit import mutation
from apps.orgs.models import AgentKey, Membership, Org, Project

User = get_user_model()

KEY_PREFIX = "rtsc_"
KNOWN_RUNTIMES = ("claude-code", "codex", "cursor", "opencode", "cline", "gemini", "ci")
PREFIX_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]{1,9}$")
NEW_ORG_CREDIT_MICROS = 10_000_000  # $10
_LAST_USED_EVERY = timedelta(seconds=60)


def hash_secret(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def user_get_or_create(*, email: str, password: str | None = None, name: str = "") -> tuple[User, bool]:
    email = (email or "").strip().lower()
    if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
        raise invalid("email", f"{email!r} is not an e-mail address.")
    user, created = User.objects.get_or_create(username=email, defaults={"email": email, "first_name": name[:150]})
    if created:
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.save(update_fields=["password"])
    elif password and not user.has_usable_password():
        user.set_password(password)
        user.save(update_fields=["password"])
    return user, created


def _unique_slug(name: str) -> str:
    base = slugify(name)[:50] or "org"
    slug, n = base, 1
    while Org.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def org_create(*, name: str, owner: User, slug: str | None = None, tz: str = "UTC") -> Org:
    """Create an org with its data key, its owner, and the new-org credit."""
    name = (name or "").strip()
    if not name or len(name) > 120:
        raise invalid("name", "An org needs a name of 1-120 characters.")
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise invalid("timezone", f"{tz!r} is not a known time zone.") from None
    with transaction.atomic():
        org = Org.objects.create(name=name, slug=slug or _unique_slug(name), timezone=tz, balance_micros=0)
        keystore.data_key_create(str(org.pk))
        membership = Membership.objects.create(org=org, user=owner, role=Membership.Role.OWNER)
        actor = Actor(org=org, principal_id=owner.pk, key=None, runtime="system", membership=membership)
        with mutation(actor, "org_create", charge=False) as unit:
            unit.record("org_created", changes={"name": [None, name], "slug": [None, org.slug]})
        credit_grant(org=org, amount_micros=NEW_ORG_CREDIT_MICROS, note="new org credit")
    return org


def credit_grant(*, org: Org, amount_micros: int, note: str, principal_id=None) -> int:
    """Add credit (staff grants, top-ups, new-org credit). Returns the new balance."""
    from apps.billing.models import LedgerEntry

    if amount_micros <= 0:
        raise invalid("amount", "Credit must be positive.")
    with transaction.atomic():
        locked = Org.objects.select_for_update(no_key=True).only("balance_micros").get(pk=org.pk)
        balance = locked.balance_micros + amount_micros
        Org.objects.filter(pk=org.pk).update(balance_micros=balance)
        LedgerEntry.objects.create(
            org=org, principal_id=principal_id, action="credit", tier="credit",
            amount_micros=amount_micros, balance_after_micros=balance, note=note[:200],
        )
    return balance


def org_delete(*, org: Org) -> None:
    """Delete an org and crypto-shred its content: its data key is destroyed."""
    org_ref = str(org.pk)
    with transaction.atomic():
        org.delete()
        transaction.on_commit(lambda: keystore.data_key_destroy(org_ref))


def member_add(*, org: Org, user: User, role: str = Membership.Role.MEMBER) -> Membership:
    if role not in Membership.Role.values:
        raise invalid("role", "role must be owner or member.")
    membership, created = Membership.objects.get_or_create(org=org, user=user, defaults={"role": role})
    if not created and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    return membership


def project_create(*, org: Org, prefix: str, name: str = "") -> Project:
    prefix = (prefix or "").strip()
    if not PREFIX_RE.fullmatch(prefix):
        raise invalid("prefix", "A project prefix is 2-10 letters or digits and starts with a letter.")
    prefix = prefix.upper()
    if Project.objects.filter(org=org, prefix=prefix).exists():
        raise ServiceError("CONFLICT", f"The org already has a project {prefix}.", field="prefix")
    try:
        with transaction.atomic():
            return Project.objects.create(org=org, prefix=prefix, name=(name or prefix)[:120])
    except IntegrityError:
        raise ServiceError("CONFLICT", f"The org already has a project {prefix}.", field="prefix") from None


def _validate_runtime(runtime: str) -> str:
    runtime = (runtime or "").strip().lower()
    if not runtime or len(runtime) > 40 or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", runtime):
        raise invalid("runtime", "runtime is a short name such as claude-code, codex, cursor or ci.")
    return runtime


def agent_key_mint(
    *, org: Org, user: User, project: Project, runtime: str, label: str = "", parent: AgentKey | None = None
) -> tuple[AgentKey, str]:
    """Mint a key; the raw secret is returned once and never stored."""
    runtime = _validate_runtime(runtime)
    if project.org_id != org.pk:
        raise not_found("Project")
    membership = Membership.objects.filter(org=org, user=user).first()
    if membership is None or membership.status != Membership.Status.ACTIVE:
        raise ServiceError("FORBIDDEN", "Keys can only be minted for active members of the org.")
    ident = secrets.token_hex(4)
    raw = f"{KEY_PREFIX}{ident}_{secrets.token_urlsafe(32)}"
    key = AgentKey.objects.create(
        org=org, user=user, project=project, runtime=runtime, label=(label or runtime)[:120],
        prefix=f"{KEY_PREFIX}{ident}", secret_hash=hash_secret(raw), parent=parent,
    )
    return key, raw


def session_key_mint(*, actor: Actor, label: str = "") -> tuple[AgentKey, str]:
    """A per-session child key with identical access (SPEC §2)."""
    parent = actor.key
    if parent is None:
        raise ServiceError("FORBIDDEN", "Only an agent key can mint a session key.")
    root = parent.parent or parent
    with mutation(actor, "mint_session_key") as unit:
        key, raw = agent_key_mint(
            org=actor.org, user=root.user, project=root.project, runtime=root.runtime,
            label=label or f"{root.label} session", parent=root,
        )
        unit.record("key_minted", changes={"key": [None, key.prefix], "parent": [None, root.prefix]})
    return key, raw


def agent_key_revoke(*, key: AgentKey) -> None:
    """Revoke a key and its session keys; their live claims end at once."""
    from apps.leases.services import claims_end_for_keys

    now = timezone.now()
    with transaction.atomic():
        ids = [key.pk, *AgentKey.objects.filter(parent=key).values_list("pk", flat=True)]
        AgentKey.objects.filter(pk__in=ids, revoked_at__isnull=True).update(revoked_at=now)
        claims_end_for_keys(org=key.org, key_ids=ids)


def agent_key_rotate(*, key: AgentKey) -> tuple[AgentKey, str]:
    """A new secret with the same owner, project, runtime and label; the old stops working."""
    with transaction.atomic():
        new_key, raw = agent_key_mint(org=key.org, user=key.user, project=key.project, runtime=key.runtime, label=key.label)
        agent_key_revoke(key=key)
    return new_key, raw


UNAUTHORIZED = ServiceError("UNAUTHORIZED", "Missing, unknown or revoked agent key.")


def agent_key_authenticate(raw: str) -> Actor:
    """The actor behind a bearer key. Every failure answers the same UNAUTHORIZED."""
    if not raw or not raw.startswith(KEY_PREFIX) or len(raw) > 200:
        raise UNAUTHORIZED
    key = (
        AgentKey.objects.select_related("org", "project", "user")
        .filter(secret_hash=hash_secret(raw), revoked_at__isnull=True, org__deleted_at__isnull=True)
        .first()
    )
    if key is None:
        raise UNAUTHORIZED
    membership = Membership.objects.filter(org_id=key.org_id, user_id=key.user_id, status=Membership.Status.ACTIVE).first()
    if membership is None or not key.user.is_active:
        raise UNAUTHORIZED
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > _LAST_USED_EVERY:
        AgentKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return Actor(org=key.org, principal_id=key.user_id, key=key, runtime=key.runtime, project=key.project, membership=membership)


def actor_for_human(*, user: User, org: Org) -> Actor:
    """A signed-in human acting in the browser (runtime ``dash``)."""
    membership = Membership.objects.filter(org=org, user=user, status=Membership.Status.ACTIVE).first()
    if membership is None:
        raise not_found("Org")
    project = org.projects.order_by("created_at").first()
    return Actor(org=org, principal_id=user.pk, key=None, runtime="dash", project=project, membership=membership)


def bootstrap(*, org_name: str, prefix: str, email: str, password: str | None, runtime: str, lease_ttl: int | None) -> dict:
    """Idempotent set-up: owner, org (with its data key), project, and a fresh agent key."""
    with transaction.atomic():
        user, _ = user_get_or_create(email=email, password=password)
        slug = slugify(org_name)[:50] or "org"
        org = Org.objects.filter(slug=slug).first()
        if org is None:
            org = org_create(name=org_name, owner=user, slug=slug)
        else:
            member_add(org=org, user=user, role=Membership.Role.OWNER)
        if lease_ttl is not None:
            if lease_ttl < 5 or lease_ttl > 7 * 24 * 3600:
                raise invalid("lease_ttl", "The lease TTL must be between 5 seconds and 7 days.")
            Org.objects.filter(pk=org.pk).update(lease_ttl_seconds=lease_ttl)
        project = Project.objects.filter(org=org, prefix=prefix.upper()).first() or project_create(org=org, prefix=prefix)
        _, raw = agent_key_mint(org=org, user=user, project=project, runtime=runtime, label=f"{runtime} (bootstrap)")
    return {"org": org.slug, "project": project.prefix, "email": user.email, "agentKey": raw}
