import threading
from datetime import timedelta

import pytest
from django.db import connection

from apps.core.errors import ServiceError
from apps.issues.selectors import issue_resolve
from apps.orgs.models import Invite, Membership
from apps.orgs.selectors import invites_list
from apps.orgs.services import (
    actor_for_human,
    invite_create,
    invite_redeem,
    invite_revoke,
    org_bootstrap_for_user,
    project_create,
    project_rename,
    user_get_or_create,
)
from tests.conftest import new_issue


def owner_actor(w):
    return actor_for_human(user=w.owner, org=w.org)


def test_invite_is_single_use_and_joins_as_member(world):
    invite, code = invite_create(actor=owner_actor(world))
    assert code.startswith("rtscinv_")
    assert Invite.objects.get(pk=invite.pk).code_hash != code  # stored hashed
    newcomer, _ = user_get_or_create(email="new@acme.test")

    membership = invite_redeem(code=code, user=newcomer)

    assert (membership.org_id, membership.role, membership.status) == (world.org.pk, "member", "active")
    again, _ = user_get_or_create(email="late@acme.test")
    with pytest.raises(ServiceError) as err:
        invite_redeem(code=code, user=again)
    assert err.value.code == "NOT_FOUND"
    assert not Membership.objects.filter(user=again).exists()
    assert [i["status"] for i in invites_list(actor=owner_actor(world))] == ["accepted"]


@pytest.mark.parametrize("days", [0, 31, -1, "x", True])
def test_invite_expiry_must_be_1_to_30_days(world, days, unchanged):
    with unchanged(), pytest.raises(ServiceError) as err:
        invite_create(actor=owner_actor(world), expires_days=days)
    assert (err.value.code, err.value.details["field"]) == ("INVALID_ARGUMENT", "expiresDays")
    assert Invite.objects.count() == 0


def test_member_cannot_invite(world):
    member = actor_for_human(user=world.member, org=world.org)
    with pytest.raises(ServiceError) as err:
        invite_create(actor=member)
    assert err.value.code == "FORBIDDEN"
    assert Invite.objects.count() == 0


def test_revoked_and_expired_invites_refuse(world, clock):
    owner = owner_actor(world)
    revoked, code1 = invite_create(actor=owner)
    invite_revoke(actor=owner, invite_id=revoked.pk)
    _, code2 = invite_create(actor=owner, expires_days=1)
    clock.advance(days=1, seconds=1)
    person, _ = user_get_or_create(email="p@acme.test")
    for code in (code1, code2, "rtscinv_unknown", "nonsense"):
        with pytest.raises(ServiceError) as err:
            invite_redeem(code=code, user=person)
        assert err.value.code == "NOT_FOUND"
    assert not Membership.objects.filter(user=person).exists()
    assert sorted(i["status"] for i in invites_list(actor=owner)) == ["expired", "revoked"]


def test_two_people_redeeming_one_code_at_once_exactly_one_wins(tworld):
    _, code = invite_create(actor=actor_for_human(user=tworld.owner, org=tworld.org))
    people = [user_get_or_create(email=f"racer{i}@acme.test")[0] for i in range(6)]
    barrier = threading.Barrier(len(people))
    outcomes = []

    def redeem(person):
        try:
            barrier.wait()
            invite_redeem(code=code, user=person)
            outcomes.append("won")
        except ServiceError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=redeem, args=(p,)) for p in people]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["NOT_FOUND"] * 5 + ["won"]
    assert Membership.objects.filter(org=tworld.org, user__in=people).count() == 1


def test_new_user_gets_own_org_with_one_project(db):
    user, _ = user_get_or_create(email="solo.dev@x.test")
    org = org_bootstrap_for_user(user=user)
    assert org_bootstrap_for_user(user=user) == org  # idempotent
    assert Membership.objects.get(user=user).role == "owner"
    assert list(org.projects.values_list("prefix", flat=True)) == ["SOLO"]
    org.refresh_from_db()
    assert org.balance_micros == 10_000_000
    assert list(org.ledger.values_list("action", "amount_micros")) == [("credit", 10_000_000)]


def test_rename_keeps_old_identifiers_resolvable(world):
    issue = new_issue(world.a, "Old name")
    project_rename(actor=owner_actor(world), prefix="ACME", new_prefix="CORE")
    assert issue_resolve(actor=world.a, identifier=f"ACME-{issue.number}").pk == issue.pk
    assert issue_resolve(actor=world.a, identifier=f"CORE-{issue.number}").pk == issue.pk
    with pytest.raises(ServiceError) as err:
        project_create(org=world.org, prefix="ACME")
    assert err.value.code == "CONFLICT"


def test_rename_refuses_taken_prefix_and_members(world, unchanged):
    project_create(org=world.org, prefix="OPS")
    with unchanged(), pytest.raises(ServiceError) as err:
        project_rename(actor=owner_actor(world), prefix="ACME", new_prefix="ops")
    assert err.value.code == "CONFLICT"
    with pytest.raises(ServiceError) as err:
        project_rename(actor=actor_for_human(user=world.member, org=world.org), prefix="ACME", new_prefix="NEW")
    assert err.value.code == "FORBIDDEN"


def test_invite_redeem_expiry_boundary(world, clock):
    invite, code = invite_create(actor=owner_actor(world), expires_days=7)
    assert invite.expires_at - clock.now == timedelta(days=7)
    clock.advance(days=6, hours=23)
    person, _ = user_get_or_create(email="intime@acme.test")
    assert invite_redeem(code=code, user=person).org_id == world.org.pk


def test_members_cannot_list_invites(world, unchanged):
    invite_create(actor=owner_actor(world))
    member = actor_for_human(user=world.member, org=world.org)
    with unchanged(), pytest.raises(ServiceError) as err:
        invites_list(actor=member)
    assert err.value.code == "FORBIDDEN"
