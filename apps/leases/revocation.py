"""Ending keys and memberships: what ends a person's or a key's live claims.

Revoking a key (and its session keys), rotating it, and suspending or retiring a member
end the live claims held through those keys at once, with receipts; so these services
live above the claims they end (apps.leases.services.claims_end_for_keys), not in
apps.orgs with the rows they change. The role rules (owners only; members manage only
their own keys) are the ones apps.orgs.services writes once.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.core.errors import ServiceError, not_found
from apps.core.unit import mutation
from apps.leases.services import claims_end_for_keys
from apps.orgs.actor import Actor
from apps.orgs.models import AgentKey, Membership
from apps.orgs.selectors import human_resolve
from apps.orgs.services import agent_key_mint, owner_admin_only

# --- keys ------------------------------------------------------------------------------


def agent_key_revoke(*, key: AgentKey) -> None:
    """Revoke a key and its session keys; their live claims end at once."""
    now = timezone.now()
    with transaction.atomic():
        ids = [key.pk, *AgentKey.objects.filter(parent=key).values_list("pk", flat=True)]
        AgentKey.objects.filter(pk__in=ids, revoked_at__isnull=True).update(revoked_at=now)
        claims_end_for_keys(org=key.org, key_ids=ids)


def agent_key_rotate(*, key: AgentKey) -> tuple[AgentKey, str]:
    """A new secret with the same owner, project, runtime and label; the old stops working."""
    with transaction.atomic():
        new_key, raw = agent_key_mint(
            org=key.org, user=key.user, project=key.project, runtime=key.runtime, label=key.label, admin=key.admin
        )
        agent_key_revoke(key=key)
    return new_key, raw


def _manageable_key(actor: Actor, key_id) -> AgentKey:
    try:
        pk = int(key_id)
    except (TypeError, ValueError):
        raise not_found("Key") from None
    key = AgentKey.objects.select_related("org", "user", "project").filter(pk=pk, org_id=actor.org.pk).first()
    if key is None:
        raise not_found("Key")
    if key.user_id != actor.principal_id and not actor.is_owner:
        # A member cannot see others' keys either: read as not found.
        raise not_found("Key")
    if key.revoked_at is not None:
        raise ServiceError("CONFLICT", f"The key {key.prefix}… is already revoked.")
    return key


def key_rotate_as(*, actor: Actor, key_id):
    return agent_key_rotate(key=_manageable_key(actor, key_id))


def key_revoke_as(*, actor: Actor, key_id) -> AgentKey:
    key = _manageable_key(actor, key_id)
    agent_key_revoke(key=key)
    return key


# --- member administration (owners only) ----------------------------------------------


def _member(actor: Actor, member_id) -> Membership:
    user_id = human_resolve(actor=actor, ref=member_id, field="memberId")
    return Membership.objects.select_related("user").get(org_id=actor.org.pk, user_id=user_id)


def _retire_keys(actor: Actor, membership: Membership) -> int:
    keys = list(AgentKey.objects.live().filter(org_id=actor.org.pk, user_id=membership.user_id, parent__isnull=True))
    for key in keys:
        agent_key_revoke(key=key)
    return len(keys)


def _set_status(*, actor: Actor, member_id, status: str, verb: str) -> dict:
    owner_admin_only(actor)
    with transaction.atomic():
        membership = _member(actor, member_id)
        if membership.is_placeholder:
            raise ServiceError(
                "CONFLICT", f"{membership.user.get_full_name()} is a placeholder for an outside author, not a member."
            )
        if membership.status == Membership.Status.RETIRED and status != Membership.Status.RETIRED:
            # Retiring is permanent (SPEC §2): a retired person comes back only through a
            # new invite to a new account, never by reactivation or suspension.
            raise ServiceError("CONFLICT", f"{membership.user.email} is retired; retiring is permanent.")
        if status != Membership.Status.ACTIVE:
            if membership.user_id == actor.principal_id:
                raise ServiceError("FORBIDDEN", "You cannot suspend or retire yourself.")
            if (
                membership.role == Membership.Role.OWNER
                and not Membership.objects.filter(
                    org_id=actor.org.pk, role=Membership.Role.OWNER, status=Membership.Status.ACTIVE
                )
                .exclude(pk=membership.pk)
                .exists()
            ):
                raise ServiceError("FORBIDDEN", "The last active owner cannot be suspended or retired.")
        before = membership.status
        retired = 0
        with mutation(actor, f"member_{verb}", charge=False) as unit:
            if before != status:
                Membership.objects.filter(pk=membership.pk).update(status=status)
                unit.record(f"member_{verb}", changes={"member": [None, membership.user.email], "status": [before, status]})
            if status != Membership.Status.ACTIVE:
                retired = _retire_keys(actor, membership)
    return {"memberId": membership.pk, "email": membership.user.email, "status": status, "keysRetired": retired}


def member_suspend(*, actor: Actor, member_id) -> dict:
    """Suspend a person: they lose access and their agent keys are retired."""
    return _set_status(actor=actor, member_id=member_id, status=Membership.Status.SUSPENDED, verb="suspended")


def member_reactivate(*, actor: Actor, member_id) -> dict:
    return _set_status(actor=actor, member_id=member_id, status=Membership.Status.ACTIVE, verb="reactivated")


def member_retire(*, actor: Actor, member_id) -> dict:
    """Retire a person for good (left the team): access ends, keys are retired."""
    return _set_status(actor=actor, member_id=member_id, status=Membership.Status.RETIRED, verb="retired")
