"""Session keys spend their parent's budget (SPEC §2): one key plus self-minted session
keys held 28 claims against a cap of 7, and the API rate limit multiplied the same way.
A parent also has a bounded number of live session keys."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import override_settings

from apps.core.errors import ServiceError
from apps.issues.models import Claim
from apps.leases import services as leases
from apps.leases.revocation import agent_key_revoke
from apps.orgs.models import AgentKey
from apps.orgs.services import agent_key_authenticate, session_key_mint
from tests.api.conftest import client
from tests.conftest import new_issue


def _sessions(world, n):
    return [agent_key_authenticate(session_key_mint(actor=world.a)[1]) for _ in range(n)]


@override_settings(RETASC_CLAIM_CAP=7)
def test_a_parent_and_its_sessions_share_one_claim_cap(world, unchanged):
    for n in range(30):
        new_issue(world.a, f"T{n}")
    actors = [world.a, *_sessions(world, 3)]
    held = 0
    for actor in actors * 3:  # round robin, as four sessions of one agent would
        try:
            leases.next_issue(actor=actor)
            held += 1
        except ServiceError as exc:
            assert exc.code == "CLAIM_CAP"
    assert held == 7
    family = AgentKey.objects.filter(pk=world.a.key_id) | AgentKey.objects.filter(parent_id=world.a.key_id)
    assert Claim.objects.filter(key__in=family, ended_at__isnull=True).count() == 7
    with unchanged():
        with pytest.raises(ServiceError) as exc:
            leases.next_batch(actor=actors[2], n=5, claim=True)
    assert exc.value.code == "CLAIM_CAP" and exc.value.details == {"held": 7, "cap": 7}
    # Another person's key has its own cap.
    assert leases.next_issue(actor=world.b)["claimToken"]


@override_settings(RETASC_CLAIM_CAP=3)
def test_next_batch_room_counts_the_whole_family(world):
    for n in range(6):
        new_issue(world.a, f"T{n}")
    (session,) = _sessions(world, 1)
    leases.next_issue(actor=world.a)
    leases.next_issue(actor=session)
    got = leases.next_batch(actor=session, n=5, claim=True)
    assert len(got["claims"]) == 1


@override_settings(RETASC_API_RATE="4/min")
def test_session_keys_share_their_parents_rate_limit(world):
    # Key ids are reused after a rolled-back test: start from an empty budget for these two.
    for agent in (world.owner_agent, world.member_agent):
        cache.delete(f"retasc:api-rate:key:{agent.actor.key.pk}")
    raws = [world.owner_agent.raw] + [session_key_mint(actor=world.a)[1] for _ in range(3)]
    statuses = [client(raw).get("/api/v1/whoami").status_code for raw in raws * 2]
    assert statuses == [200] * 4 + [429] * 4
    assert client(world.member_agent.raw).get("/api/v1/whoami").status_code == 200  # another key


@override_settings(RETASC_SESSION_KEYS_MAX=3)
def test_live_session_keys_per_parent_are_bounded(world, unchanged):
    keys = [session_key_mint(actor=world.a)[0] for _ in range(2)]
    # A session key mints for its parent: it counts against the same bound.
    session = agent_key_authenticate(session_key_mint(actor=world.a)[1])
    with unchanged():
        for actor in (world.a, session):
            with pytest.raises(ServiceError) as exc:
                session_key_mint(actor=actor)
            assert exc.value.code == "SESSION_KEY_CAP"
            assert exc.value.http_status == 429
            assert exc.value.details == {"live": 3, "limit": 3}
            assert exc.value.tell_human
    assert AgentKey.objects.filter(parent_id=world.a.key_id).count() == 3
    # Revoking one makes room; another person's key is not affected.
    agent_key_revoke(key=keys[0])
    assert session_key_mint(actor=world.a)[0].parent_id == world.a.key_id
    assert session_key_mint(actor=world.b)[0].parent_id == world.b.key_id
