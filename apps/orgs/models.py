from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.core.sealed import Sealed


class Org(models.Model):
    """A tenant. Its UUID names its data key in the key store and binds its ciphertexts."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    timezone = models.CharField(max_length=64, default="UTC")
    lease_ttl_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: deployment default.")
    claim_cap = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: deployment default.")
    # The receipt chain's head, advanced only under this row's lock (apps.work.writer).
    activity_seq = models.BigIntegerField(default=0, editable=False)
    chain_head = models.CharField(max_length=64, default="0" * 64, editable=False)
    # Links are keyed (HMAC under the org's chain key). False only for a chain written
    # before the chain key, until ``relink_chains`` re-links it once (apps.issues.chain).
    chain_keyed = models.BooleanField(default=True, editable=False)
    # Metering, advanced in the same locked update as the chain head.
    balance_micros = models.BigIntegerField(default=0)
    monthly_cap_micros = models.BigIntegerField(null=True, blank=True)
    spend_month = models.CharField(max_length=7, default="", editable=False)
    spend_month_micros = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Who created it (self-serve creation is throttled per person); None for operators.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    def __str__(self) -> str:
        return self.slug

    @property
    def lease_ttl(self) -> int:
        return self.lease_ttl_seconds or settings.RETASC_LEASE_TTL_SECONDS

    @property
    def effective_claim_cap(self) -> int:
        return self.claim_cap or settings.RETASC_CLAIM_CAP


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner"
        MEMBER = "member"

    class Status(models.TextChoices):
        ACTIVE = "active"
        SUSPENDED = "suspended"
        RETIRED = "retired"
        # Stands for an outside author (an upstream GitHub/GitLab user) so their comments
        # have an author. Never signs in, never holds keys, never has a lane; a real member
        # may later claim it (apps.orgs.services.placeholder_get_or_create).
        PLACEHOLDER = "placeholder"

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    # A placeholder's address at its source (an import knew it): the member whose verified
    # address it is may claim the placeholder (apps.orgs.services.placeholder_claim).
    upstream_email = models.EmailField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "user"], name="membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.org} ({self.role})"

    @property
    def is_placeholder(self) -> bool:
        return self.status == self.Status.PLACEHOLDER


class Project(models.Model):
    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="projects")
    prefix = models.CharField(max_length=10)
    name = models.CharField(max_length=120)
    # Last allocated issue number; bumped with F() under the row lock, so no gaps or dupes.
    issue_seq = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "prefix"], name="project_prefix_unique")]

    def __str__(self) -> str:
        return self.prefix


class AgentKeyQuerySet(models.QuerySet):
    def live(self):
        return self.filter(revoked_at__isnull=True)


class AgentKey(models.Model):
    """A bearer key for an agent. Only the SHA-256 of the secret is stored."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="agent_keys")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_keys")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="agent_keys")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="session_keys")
    runtime = models.CharField(max_length=40)
    label = models.CharField(max_length=120, blank=True)
    prefix = models.CharField(max_length=16, help_text="Visible start of the key, e.g. rtsc_ab12cd34.")
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Set only for a key issued as an OAuth access token: it stops working then, and the
    # client renews it with its refresh token (apps.orgs.oauth).
    expires_at = models.DateTimeField(null=True, blank=True)
    # Owner keys act with their owner's role, but the member tools (suspend, reactivate,
    # retire) and the export also need this flag: off for minted keys, on for the
    # operator's bootstrap key. Session keys and rotations carry their parent's.
    admin = models.BooleanField(default=False, help_text="May use the member tools and export (when its owner is an org owner).")

    objects = AgentKeyQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["org", "user"], condition=Q(revoked_at__isnull=True), name="agentkey_live")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.runtime}/{self.label})"


class ProjectAlias(models.Model):
    """A former prefix of a renamed project: old identifiers (OLD-12) keep resolving."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="aliases")
    prefix = models.CharField(max_length=10)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "prefix"], name="project_alias_unique")]

    def __str__(self) -> str:
        return f"{self.prefix} -> {self.project_id}"


class Invite(models.Model):
    """A single-use invitation code (``rtscinv_…``), stored hashed, shown once."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="invites")
    code_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=20)
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.role})"

    def status_at(self, now) -> str:
        if self.accepted_at:
            return "accepted"
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        return "pending"


class SavedFilter(models.Model):
    """A member's named view of the queue: the filter's query string, sealed like content
    (it may hold search words). Only its owner lists, applies or deletes it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="saved_filters")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_filters")
    name = models.CharField(max_length=80)
    query_enc = models.BinaryField()
    query = Sealed()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "user", "name"], name="saved_filter_unique_name")]

    def __str__(self) -> str:
        return self.name


class OAuthClient(models.Model):
    """An MCP client registered by OAuth dynamic client registration (RFC 7591).

    Its secret (for confidential clients) is not stored: it is derived from the client id
    and the deployment's secret key (``apps.orgs.oauth.client_secret``).
    """

    client_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    redirect_uris = models.JSONField(default=list)
    metadata = models.JSONField(default=dict, help_text="The registered client metadata, without any secret.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.client_id})"


class OAuthCode(models.Model):
    """A single-use authorization code a human approved in the Dash (10 minutes)."""

    code_hash = models.CharField(max_length=64, unique=True)
    client = models.ForeignKey(OAuthClient, on_delete=models.CASCADE, related_name="codes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    code_challenge = models.CharField(max_length=128)
    redirect_uri = models.CharField(max_length=2000)
    redirect_uri_explicit = models.BooleanField(default=True)
    scopes = models.JSONField(default=list)
    resource = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"code for {self.client_id} ({self.created_at:%Y-%m-%d %H:%M})"


class OAuthGrant(models.Model):
    """An approved client's standing grant: its agent key (the access token) and the hash of
    its current refresh token. Revoking the key (keys page, /revoke) ends the grant."""

    client = models.ForeignKey(OAuthClient, on_delete=models.CASCADE, related_name="grants")
    key = models.OneToOneField(AgentKey, on_delete=models.CASCADE, related_name="oauth_grant")
    refresh_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    resource = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"grant of {self.client_id} -> key {self.key_id}"


class CreditGrant(models.Model):
    """The new-org credit, granted once per verified person: one row per e-mail address,
    ever. The unique address is what makes it once, even under concurrent creation; the
    row outlives the org and the account, so deleting and signing up again earns nothing."""

    email = models.CharField(max_length=254, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    org = models.ForeignKey(Org, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    micros = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.email}: {self.micros}"
