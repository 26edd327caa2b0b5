"""Orgs, members, projects and agent keys (writes)."""

from __future__ import annotations

import hashlib
import re
import secrets
import zoneinfo
from datetime import timedelta

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.core import inputs, keystore, sql
from apps.core.errors import ServiceError, invalid, not_found
from apps.core.unit import mutation
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, CreditGrant, Invite, Membership, Org, Project, ProjectAlias, SavedFilter
from apps.orgs.selectors import email_verified

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
        raise invalid("email", f"{inputs.brief(email)!r} is not an e-mail address.")
    user, created = User.objects.get_or_create(username=email, defaults={"email": email, "first_name": name[:150]})
    if created:
        # The operator names the address and creates the account: they vouch for it. An
        # account that already existed (someone signed up with that address) is left
        # as it is: it acts in an org only once its owner verifies the address.
        EmailAddress.objects.get_or_create(user=user, email=email, defaults={"verified": True, "primary": True})
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.save(update_fields=["password"])
    elif password and not user.has_usable_password():
        user.set_password(password)
        user.save(update_fields=["password"])
    return user, created


PLACEHOLDER_PROVIDERS = ("github", "gitlab", "linear", "retasc", "beads")
_PROVIDER_LABELS = {"github": "GitHub", "gitlab": "GitLab", "linear": "Linear", "retasc": "Retasc", "beads": "beads"}
_LOGIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def placeholder_get_or_create(*, org: Org, provider: str, login: str, name: str = "", email: str = "") -> Membership:
    """The org's placeholder person for an outside author (``provider`` user ``login``).

    One per (org, provider, login), created on first use. The user has an unusable
    password, is inactive (so no sign-in path accepts it) and a non-deliverable address
    under the reserved ``.invalid`` domain; the membership's status ``placeholder`` keeps
    it out of keys, lanes and every "active member" rule. ``name`` is shown instead of the
    login when given; ``email`` (the address at the source, when an import knows it) is
    recorded so that the member with that verified address can claim the placeholder.
    """
    provider = (provider or "").strip().lower()
    login = (login or "").strip()
    if provider not in PLACEHOLDER_PROVIDERS:
        raise invalid("provider", f"provider is one of {', '.join(PLACEHOLDER_PROVIDERS)}.")
    if not _LOGIN_RE.fullmatch(login):
        raise invalid("login", f"{login!r} is not a {provider} user name.")
    email = (email or "").strip().lower()
    if email and not _EMAIL_RE.fullmatch(email):
        email = ""
    tag = org.pk.hex[:12]
    username = f"placeholder.{tag}.{provider}.{login.lower()}"
    address = f"{login.lower()}.{tag}@{provider}.placeholder.invalid"
    label = _PROVIDER_LABELS[provider]
    shown = (name or "").strip() or login
    with transaction.atomic():
        user, created = User.objects.get_or_create(
            username=username,
            defaults={"email": address, "first_name": f"{shown} ({label})"[:150], "is_active": False},
        )
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        membership, made = Membership.objects.get_or_create(
            org=org,
            user=user,
            defaults={"role": Membership.Role.MEMBER, "status": Membership.Status.PLACEHOLDER, "upstream_email": email},
        )
        if not made and email and membership.upstream_email != email:
            membership.upstream_email = email
            membership.save(update_fields=["upstream_email"])
    return membership


def _unique_slug(name: str) -> str:
    base = slugify(name)[:50] or "org"
    slug, n = base, 1
    while Org.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def require_verified(user: User) -> None:
    """An account acts in an org only with a verified e-mail address (SPEC §2): else
    anyone could sign up as a future colleague's address and wait to be added."""
    if not email_verified(user=user):
        raise ServiceError(
            "FORBIDDEN",
            f"Verify your e-mail address {user.email} before acting in an org.",
            tell_human="Open the link in the confirmation e-mail, or send a new one from /accounts/email/.",
        )


def _grant_new_org_credit(*, org: Org, owner: User) -> int:
    """The new-org credit, once per verified person (one CreditGrant row per address);
    the unique address decides, so two concurrent creations cannot both earn it."""
    try:
        with transaction.atomic():
            CreditGrant.objects.create(email=owner.email.strip().lower(), user=owner, org=org, micros=NEW_ORG_CREDIT_MICROS)
    except IntegrityError:
        return 0
    return NEW_ORG_CREDIT_MICROS


def org_create(*, name: str, owner: User, slug: str | None = None, tz: str = "UTC", created_by: User | None = None) -> Org:
    """Create an org with its data key and its owner; the first org of a verified person
    also gets the new-org credit."""
    require_verified(owner)
    name = (name or "").strip()
    if not name or len(name) > 120:
        raise invalid("name", "An org needs a name of 1-120 characters.")
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise invalid("timezone", f"{inputs.brief(tz)!r} is not a known time zone.") from None
    with transaction.atomic():
        org = Org.objects.create(name=name, slug=slug or _unique_slug(name), timezone=tz, balance_micros=0, created_by=created_by)
        keystore.data_key_create(str(org.pk))
        membership = Membership.objects.create(org=org, user=owner, role=Membership.Role.OWNER)
        actor = Actor(org=org, principal_id=owner.pk, key=None, runtime="system", membership=membership)
        with mutation(actor, "org_create", charge=False) as unit:
            unit.record("org_created", changes={"name": [None, name], "slug": [None, org.slug]})
            credit = _grant_new_org_credit(org=org, owner=owner)
            if credit:
                unit.credit(credit, note="new org credit")
    return org


def org_create_for(*, user: User, name: str) -> Org:
    """A person creates an org for themselves (self-serve): throttled per person, at most
    ``RETASC_ORG_CREATE_PER_HOUR`` in any hour. (Counting rows, not a cache: it holds
    across processes and restarts; two racing calls can overshoot by one, and the credit
    is once per person whatever the count.)"""
    require_verified(user)
    since = timezone.now() - timedelta(hours=1)
    if Org.objects.filter(created_by=user, created_at__gte=since).count() >= settings.RETASC_ORG_CREATE_PER_HOUR:
        raise ServiceError(
            "RATE_LIMITED",
            f"You created {settings.RETASC_ORG_CREATE_PER_HOUR} orgs in the last hour; try again later.",
            retryAfterSeconds=3600,
        )
    return org_create(name=name, owner=user, created_by=user)


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

    if Project.objects.filter(org=org, prefix=prefix).exists() or ProjectAlias.objects.filter(org=org, prefix=prefix).exists():
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
    *,
    org: Org,
    user: User,
    project: Project,
    runtime: str,
    label: str = "",
    parent: AgentKey | None = None,
    admin: bool = False,
) -> tuple[AgentKey, str]:
    """Mint a key; the raw secret is returned once and never stored. A session key takes
    its parent's ``admin`` flag (identical access, SPEC §2)."""
    runtime = _validate_runtime(runtime)
    if project.org_id != org.pk:
        raise not_found("Project")
    membership = Membership.objects.filter(org=org, user=user).first()
    if membership is None or membership.status != Membership.Status.ACTIVE:
        raise ServiceError("FORBIDDEN", "Keys can only be minted for active members of the org.")
    require_verified(user)
    ident = secrets.token_hex(4)
    raw = f"{KEY_PREFIX}{ident}_{secrets.token_urlsafe(32)}"
    key = AgentKey.objects.create(
        org=org,
        user=user,
        project=project,
        runtime=runtime,
        label=(label or runtime)[:120],
        prefix=f"{KEY_PREFIX}{ident}",
        secret_hash=hash_secret(raw),
        parent=parent,
        admin=parent.admin if parent is not None else admin,
    )
    return key, raw


def session_key_mint(*, actor: Actor, label: str = "") -> tuple[AgentKey, str]:
    """A per-session child key with identical access (SPEC §2)."""
    parent = actor.key
    if parent is None:
        raise ServiceError("FORBIDDEN", "Only an agent key can mint a session key.")
    root = parent.parent or parent
    with mutation(actor, "mint_session_key") as unit:
        # The bound on live session keys per parent (SPEC §2), checked under the parent
        # key's row lock so that concurrent mints cannot both pass it.
        AgentKey.objects.select_for_update().filter(pk=root.pk).values_list("pk", flat=True).get()
        live = AgentKey.objects.live().filter(parent_id=root.pk).count()
        limit = settings.RETASC_SESSION_KEYS_MAX
        if live >= limit:
            raise ServiceError(
                "SESSION_KEY_CAP",
                f"This key already has {live} live session keys (limit {limit}); revoke unused ones first.",
                tell_human="Revoke unused session keys on the Dash's keys page (or raise RETASC_SESSION_KEYS_MAX).",
                live=live,
                limit=limit,
            )
        key, raw = agent_key_mint(
            org=actor.org,
            user=root.user,
            project=root.project,
            runtime=root.runtime,
            label=label or f"{root.label} session",
            parent=root,
        )
        unit.record("key_minted", changes={"key": [None, key.prefix], "parent": [None, root.prefix]})
    return key, raw


UNAUTHORIZED = ServiceError("UNAUTHORIZED", "Missing, unknown or revoked agent key.")


def _key_with_holder(secret_hash: str):
    """The live key with this hash, with its org, project and user, and the holder's
    active membership of the key's org (or None): one statement, written out (every
    request pays it; see apps.core.sql)."""

    models_ = (AgentKey, Org, Project, User, Membership)
    q = connection.ops.quote_name
    query = (
        f"SELECT {sql.columns(AgentKey, 'k')}, {sql.columns(Org, 'o')}, {sql.columns(Project, 'p')},"
        f" {sql.columns(User, 'u')}, {sql.columns(Membership, 'm')},"
        # The holder's own address must be verified (SPEC §2), checked in the same statement.
        f" EXISTS (SELECT 1 FROM {q(EmailAddress._meta.db_table)} e"
        f" WHERE e.user_id = k.user_id AND e.verified = %s AND LOWER(e.email) = LOWER(u.email))"
        f" FROM {q(AgentKey._meta.db_table)} k"
        f" JOIN {q(Org._meta.db_table)} o ON o.id = k.org_id"
        f" JOIN {q(Project._meta.db_table)} p ON p.id = k.project_id"
        f" JOIN {q(User._meta.db_table)} u ON u.id = k.user_id"
        f" LEFT JOIN {q(Membership._meta.db_table)} m"
        f" ON m.org_id = k.org_id AND m.user_id = k.user_id AND m.status = %s"
        " WHERE k.secret_hash = %s AND k.revoked_at IS NULL AND o.deleted_at IS NULL"
        " AND (k.expires_at IS NULL OR k.expires_at > %s)"
    )
    with connection.cursor() as cur:
        cur.execute(
            query,
            [True, Membership.Status.ACTIVE.value, secret_hash, connection.ops.adapt_datetimefield_value(timezone.now())],
        )
        row = cur.fetchone()
    if row is None or not row[-1]:
        return None, None
    parts, at = [], 0
    for model in models_:
        parts.append(row[at : at + sql.width(model)])
        at += sql.width(model)
    key, org, project, user = (sql.load(m, values) for m, values in zip(models_[:4], parts[:4], strict=True))
    key.org, key.project, key.user = org, project, user
    membership = None
    if parts[4][0] is not None:
        membership = sql.load(Membership, parts[4])
        membership.org, membership.user = org, user
    return key, membership


def agent_key_authenticate(raw: str) -> Actor:
    """The actor behind a bearer key. Every failure answers the same UNAUTHORIZED."""
    if not raw or not raw.startswith(KEY_PREFIX) or len(raw) > 200:
        raise UNAUTHORIZED
    key, membership = _key_with_holder(hash_secret(raw))
    if key is None or membership is None or not key.user.is_active:
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
    require_verified(user)
    project = org.projects.order_by("created_at").first()
    return Actor(org=org, principal_id=user.pk, key=None, runtime="dash", project=project, membership=membership)


def bootstrap(
    *,
    org_name: str,
    prefix: str,
    email: str,
    password: str | None,
    runtime: str,
    lease_ttl: int | None,
    reuse_key: str | None = None,
) -> dict:
    """Idempotent set-up: owner, org (with its data key), project, and a fresh agent key.

    With ``reuse_key`` (a raw key minted by an earlier run), that key is answered again
    when it is still live and is this owner's key for this org, project and runtime;
    otherwise a new one is minted (``reused`` says which).
    """
    if lease_ttl is not None and not 5 <= lease_ttl <= 7 * 24 * 3600:
        # Checked before anything is created (the org's data key is written to the key store).
        raise invalid("lease_ttl", "The lease TTL must be between 5 seconds and 7 days.")
    generated = None
    if not password and not User.objects.filter(username=(email or "").strip().lower(), password__regex=r"^[^!]").exists():
        # A new owner with no password given gets one, printed once, so the Dash login works.
        generated = password = secrets.token_urlsafe(12)
    with transaction.atomic():
        user, _ = user_get_or_create(email=email, password=password)
        slug = slugify(org_name)[:50] or "org"
        org = Org.objects.filter(slug=slug).first()
        if org is None:
            org = org_create(name=org_name, owner=user, slug=slug)
        else:
            member_add(org=org, user=user, role=Membership.Role.OWNER)
        if lease_ttl is not None:
            Org.objects.filter(pk=org.pk).update(lease_ttl_seconds=lease_ttl)
        project = Project.objects.filter(org=org, prefix=prefix.upper()).first() or project_create(org=org, prefix=prefix)
        raw = (
            reuse_key
            if reuse_key and _is_bootstrap_key(reuse_key, org=org, project=project, user=user, runtime=runtime)
            else None
        )
        reused = raw is not None
        if raw is None:
            # The operator's own key: the one key minted with the admin flag.
            _, raw = agent_key_mint(
                org=org, user=user, project=project, runtime=runtime, label=f"{runtime} (bootstrap)", admin=True
            )
    result = {"org": org.slug, "project": project.prefix, "email": user.email, "agentKey": raw, "reused": reused}
    if generated:
        result["password"] = generated
    return result


def _is_bootstrap_key(raw: str, *, org: Org, project: Project, user, runtime: str) -> bool:
    key = AgentKey.objects.live().filter(secret_hash=hash_secret(raw.strip()), parent__isnull=True).first()
    return (
        key is not None
        and (key.org_id, key.project_id, key.user_id, key.runtime, key.admin) == (org.pk, project.pk, user.pk, runtime, True)
        and Membership.objects.filter(org=org, user=user, status=Membership.Status.ACTIVE).exists()
    )


# --- the owners-only rule -------------------------------------------------------------


def owner_only(actor: Actor) -> None:
    if not actor.is_owner:
        raise ServiceError("FORBIDDEN", "Only an org owner can do that.", tell_human="Ask an owner of the org.")


def owner_admin_only(actor: Actor) -> None:
    """Owners only; through an agent key, only a key with the ``admin`` flag (the member
    tools and the export). A human in the browser or the CLI acts with their own role."""
    owner_only(actor)
    if actor.key is not None and not actor.key.admin:
        raise ServiceError(
            "FORBIDDEN",
            "This agent key is not an admin key; the member tools and the export need one.",
            tell_human="Do it in the Dash or with the retasc CLI, or use the operator's admin key.",
        )


# --- invites ----------------------------------------------------------------------------

INVITE_PREFIX = "rtscinv_"


def invite_create(*, actor: Actor, expires_days: int = 7, role: str = Membership.Role.MEMBER):
    """An owner invites with a single-use code, valid 1-30 days. The code is shown once."""

    owner_only(actor)
    try:
        days = int(expires_days)
    except (TypeError, ValueError):
        raise invalid("expiresDays", "expiresDays is a whole number of days, 1-30.") from None
    if not 1 <= days <= 30 or isinstance(expires_days, bool):
        raise invalid("expiresDays", "expiresDays is a whole number of days, 1-30.")
    if role not in Membership.Role.values:
        raise invalid("role", "role must be owner or member.")
    raw = INVITE_PREFIX + secrets.token_urlsafe(18)
    with mutation(actor, "invite_create", charge=False) as unit:
        invite = Invite.objects.create(
            org=actor.org,
            code_hash=hash_secret(raw),
            prefix=raw[:14],
            role=role,
            created_by_id=actor.principal_id,
            expires_at=timezone.now() + timedelta(days=days),
        )
        unit.record("invite_created", changes={"invite": [None, {"id": invite.pk, "role": role, "days": days}]})
    return invite, raw


def invite_revoke(*, actor: Actor, invite_id) -> None:
    owner_only(actor)
    with mutation(actor, "invite_revoke", charge=False) as unit:
        changed = Invite.objects.filter(pk=invite_id, org=actor.org, accepted_at__isnull=True, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if not changed:
            if not Invite.objects.filter(pk=invite_id, org=actor.org).exists():
                raise not_found("Invite")
            raise ServiceError("CONFLICT", "That invite was already used or revoked.")
        unit.record("invite_revoked", changes={"invite": [{"id": invite_id}, None]})


def invite_redeem(*, code: str, user: User) -> Membership:
    """Join the org with a code. Single use: of two simultaneous redeemers exactly one wins
    (a conditional UPDATE that only succeeds while the invite is still pending)."""

    bad = ServiceError("NOT_FOUND", "That invite code is not valid (unknown, used, revoked or expired).")
    if not isinstance(code, str) or not code.startswith(INVITE_PREFIX) or len(code) > 100:
        raise bad
    require_verified(user)  # checked before the code is used up
    now = timezone.now()
    invite = Invite.objects.select_related("org").filter(code_hash=hash_secret(code.strip())).first()
    if invite is None or invite.org.deleted_at is not None:
        raise bad
    with transaction.atomic():
        won = Invite.objects.filter(pk=invite.pk, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now).update(
            accepted_at=now, accepted_by=user
        )
        if won != 1:
            raise bad
        existing = Membership.objects.filter(org=invite.org, user=user).first()
        if existing is not None and existing.status != Membership.Status.ACTIVE:
            raise ServiceError("FORBIDDEN", "Your membership of this org is suspended; ask an owner.")
        membership = existing or Membership.objects.create(org=invite.org, user=user, role=invite.role)
        actor = Actor(org=invite.org, principal_id=user.pk, key=None, runtime="dash", membership=membership)
        with mutation(actor, "invite_redeem", charge=False) as unit:
            unit.record("member_joined", changes={"member": [None, user.email], "role": [None, membership.role]})
    return membership


def org_bootstrap_for_user(*, user: User) -> Org:
    """A new person's own org with one project (first sign-in). Idempotent."""
    membership = Membership.objects.filter(user=user, status=Membership.Status.ACTIVE).select_related("org").first()
    if membership is not None:
        return membership.org
    require_verified(user)
    base = (user.get_full_name() or user.email.split("@")[0] or "My").strip()
    with transaction.atomic():
        org = org_create(name=f"{base}'s org"[:120], owner=user)
        letters = re.sub(r"[^A-Za-z0-9]", "", base).upper()
        prefix = (letters if letters[:1].isalpha() else "P" + letters)[:4]
        project_create(org=org, prefix=prefix if len(prefix) >= 2 else "WORK", name="Work")
    return org


def project_rename(*, actor: Actor, prefix: str, new_prefix: str, name: str | None = None) -> Project:
    """Rename a project's prefix; the old prefix stays an alias so old identifiers resolve."""

    owner_only(actor)
    new_prefix = (new_prefix or "").strip()
    if not PREFIX_RE.fullmatch(new_prefix):
        raise invalid("prefix", "A project prefix is 2-10 letters or digits and starts with a letter.")
    new_prefix = new_prefix.upper()
    with transaction.atomic():
        project = Project.objects.select_for_update().filter(org=actor.org, prefix=str(prefix).upper()).first()
        if project is None:
            raise not_found(f"Project {prefix}")
        if new_prefix != project.prefix:
            taken = (
                Project.objects.filter(org=actor.org, prefix=new_prefix).exists()
                or ProjectAlias.objects.filter(org=actor.org, prefix=new_prefix).exclude(project=project).exists()
            )
            if taken:
                raise ServiceError("CONFLICT", f"The prefix {new_prefix} is taken in this org.", field="prefix")
            ProjectAlias.objects.filter(org=actor.org, prefix=new_prefix, project=project).delete()
            ProjectAlias.objects.create(org=actor.org, project=project, prefix=project.prefix)
            old = project.prefix
            project.prefix = new_prefix
        else:
            old = project.prefix
        if name:
            project.name = name.strip()[:120]
        project.save(update_fields=["prefix", "name"])
        with mutation(actor, "project_rename", charge=False) as unit:
            unit.record("project_renamed", changes={"prefix": [old, new_prefix]})
    return project


# --- actor-facing key and project management (every interface calls these) ----------
# The role rules live here, once: members manage only their own keys (another person's
# key reads as not found), only owners mint for someone else, only owners add projects.


def forbidden(message: str) -> ServiceError:
    return ServiceError("FORBIDDEN", message, tell_human="Ask an owner of the org.")


def key_mint_as(*, actor: Actor, project_prefix: str, runtime: str, label: str = "", for_member_id=None):
    """Mint a key for yourself; owners may mint for another active member."""
    user_id = actor.principal_id
    if for_member_id not in (None, "", str(actor.membership.pk) if actor.membership else None):
        if not actor.is_owner:
            raise forbidden("Only an org owner can mint keys for someone else.")
        membership = Membership.objects.filter(org_id=actor.org.pk, pk=for_member_id).select_related("user").first()
        if membership is None:
            raise invalid("member", "That person is not a member of this org.")
        user_id = membership.user_id
    project = Project.objects.filter(org_id=actor.org.pk, prefix=(project_prefix or "").strip().upper()).first()
    if project is None:
        raise not_found(f"Project {project_prefix}")

    user = get_user_model().objects.get(pk=user_id)
    return agent_key_mint(org=actor.org, user=user, project=project, runtime=runtime, label=label)


def project_create_as(*, actor: Actor, prefix: str, name: str = "") -> Project:
    if not actor.is_owner:
        raise forbidden("Only an org owner can create projects.")
    return project_create(org=actor.org, prefix=prefix, name=name)


# --- org settings (owners only) -------------------------------------------------------

MAX_CLAIM_CAP = 1000
UNCHANGED = object()  # a setting not given


def org_settings_update(*, actor: Actor, lease_ttl_seconds=None, claim_cap=None, timezone_name=None) -> Org:
    """Change the org's lease length, claim cap per key and time zone. Owners only.

    Each value is a whole number as text or a number; an empty string returns that
    setting to the deployment default. ``None`` leaves it as it is. One receipt names
    what changed.
    """
    owner_only(actor)
    changes: dict = {}

    def whole(value, field, low, high, what):
        if value is None:
            return UNCHANGED
        if isinstance(value, str) and value.strip() == "":
            return None
        try:
            number = int(str(value).strip())
        except ValueError:
            raise invalid(field, f"{what} is a whole number from {low} to {high}.") from None
        if not low <= number <= high:
            raise invalid(field, f"{what} is a whole number from {low} to {high}.")
        return number

    ttl = whole(lease_ttl_seconds, "leaseTtlSeconds", 5, 7 * 24 * 3600, "The lease length in seconds")
    cap = whole(claim_cap, "claimCap", 1, MAX_CLAIM_CAP, "The claim cap")
    tz = UNCHANGED
    if timezone_name is not None:
        tz = str(timezone_name).strip()
        try:
            zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise invalid("timezone", f"{tz!r} is not a known time zone.") from None
    wanted = {"lease_ttl_seconds": ttl, "claim_cap": cap, "timezone": tz}
    names = {"lease_ttl_seconds": "leaseTtlSeconds", "claim_cap": "claimCap", "timezone": "timezone"}
    with mutation(actor, "org_settings", charge=False) as unit:
        # The org row is locked first (and again, re-entrantly, when the unit flushes):
        # nothing else is locked in this action, so the lock order holds.
        org = Org.objects.select_for_update(no_key=True).get(pk=actor.org.pk)
        changed = [attr for attr, value in wanted.items() if value is not UNCHANGED and getattr(org, attr) != value]
        for attr in changed:
            changes[names[attr]] = [getattr(org, attr), wanted[attr]]
            setattr(org, attr, wanted[attr])
        if changed:
            org.save(update_fields=changed)
            unit.record("org_settings_changed", changes=changes)
    return org


MAX_SAVED_FILTERS = 50  # per member and org
MAX_FILTER_QUERY = 2000


def _filter_owner(actor: Actor) -> None:
    if actor.is_agent or actor.principal_id is None:
        raise forbidden("Saved filters belong to people; sign in to the Dash.")


def saved_filter_save(*, actor: Actor, name, query) -> SavedFilter:
    """Save the member's current filter under ``name``; the same name again replaces it.

    ``query`` is the filter's query string as the interface normalized it. A member keeps
    at most MAX_SAVED_FILTERS. The member's own rows are locked (in primary-key order)
    before counting, so two saves cannot both pass the cap.
    """
    _filter_owner(actor)
    name = str(name or "").strip()
    if not name or len(name) > 80 or "\n" in name:
        raise invalid("name", "Name the filter: one line, at most 80 characters.")
    query = str(query or "").strip().lstrip("?")
    if len(query) > MAX_FILTER_QUERY:
        raise invalid("query", f"That filter is too long to save (at most {MAX_FILTER_QUERY} characters).")
    with mutation(actor, "saved_filter_save", charge=False):
        mine = list(
            SavedFilter.objects.filter(org_id=actor.org.pk, user_id=actor.principal_id)
            .order_by("pk")
            .select_for_update(of=("self",))
        )
        same = next((f for f in mine if f.name == name), None)
        if same is not None:
            same.query = query
            same.save(update_fields=["query_enc", "updated_at"])
            return same
        if len(mine) >= MAX_SAVED_FILTERS:
            raise ServiceError("CONFLICT", f"You have {MAX_SAVED_FILTERS} saved filters; delete one first.")
        saved = SavedFilter(org_id=actor.org.pk, user_id=actor.principal_id, name=name)
        saved.query = query
        try:
            with transaction.atomic():
                saved.save(force_insert=True)
        except IntegrityError:  # the same name saved at the same moment by another tab
            raise ServiceError("CONFLICT", f"A filter named {name!r} was just saved; try again.") from None
    return saved


def saved_filter_delete(*, actor: Actor, filter_id) -> None:
    """Delete one of the member's saved filters (NOT_FOUND for anyone else's)."""
    _filter_owner(actor)
    with mutation(actor, "saved_filter_delete", charge=False):
        try:
            deleted, _ = SavedFilter.objects.filter(pk=filter_id, org_id=actor.org.pk, user_id=actor.principal_id).delete()
        except (ValueError, TypeError, ValidationError):
            deleted = 0
        if deleted == 0:
            raise not_found("That saved filter")
