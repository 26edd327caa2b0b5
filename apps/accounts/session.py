"""Which org a signed-in person is looking at, and their first sign-in.

The current org lives in the session (``retasc_org``). A person with no active
membership gets their own org with one project on first sign-in
(``org_bootstrap_for_user``), unless they arrived through an invite link, in which
case joining that org comes first.
"""

from __future__ import annotations

from apps.orgs.models import Membership, Org
from apps.orgs.services import org_bootstrap_for_user

SESSION_ORG = "retasc_org"
SESSION_INVITE = "retasc_invite"


def memberships_of(user) -> list[Membership]:
    return list(
        Membership.objects.filter(user=user, status=Membership.Status.ACTIVE, org__deleted_at__isnull=True)
        .select_related("org")
        .order_by("org__name")
    )


def current_org(request) -> Org | None:
    """The org the request acts in, bootstrapping one on first sign-in.

    Returns None when the person has no org yet and is on their way to redeem an invite.
    """
    user = request.user
    memberships = memberships_of(user)
    wanted = request.session.get(SESSION_ORG)
    for m in memberships:
        if str(m.org_id) == wanted:
            return m.org
    if memberships:
        org = memberships[0].org
    elif request.session.get(SESSION_INVITE):
        return None
    else:
        org = org_bootstrap_for_user(user=user)
    request.session[SESSION_ORG] = str(org.pk)
    return org


def switch_org(request, org_id: str) -> bool:
    for m in memberships_of(request.user):
        if str(m.org_id) == str(org_id):
            request.session[SESSION_ORG] = str(m.org_id)
            return True
    return False
