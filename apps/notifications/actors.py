"""Acting as a member from outside the Dash (a chat intent, an approval link)."""

from __future__ import annotations

from apps.core.errors import ServiceError
from apps.orgs.actor import Actor
from apps.orgs.models import Membership


def member_actor(*, org_id, user_id, runtime: str) -> Actor:
    """The member as an actor (no key: a human, like the Dash). Refuses a suspended member."""
    membership = (
        Membership.objects.select_related("org")
        .filter(org_id=org_id, user_id=user_id, status=Membership.Status.ACTIVE, org__deleted_at__isnull=True)
        .first()
    )
    if membership is None:
        raise ServiceError("FORBIDDEN", "You are not an active member of this org.")
    return Actor(org=membership.org, principal_id=user_id, key=None, runtime=runtime, membership=membership)
