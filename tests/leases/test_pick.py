"""The hand-written pick (``leases._pick``) chooses what ``ready_queryset(...).first()`` does.

``next_issue`` runs ``_pick`` under the project lock; the ORM queryset stays the one
definition of eligibility that batches and queue counts use. Both are walked through a
backlog with every case the rules distinguish: lanes, reviews by their submitter, open and
closed blockers, expired and live leases, triage and non-work items, ties on rank and time.
"""

from __future__ import annotations

from django.utils import timezone

from apps.issues.services import issue_update
from apps.leases import services as leases
from tests.conftest import new_issue
from tests.leases.test_dispatch import finish, to_review


def agree(w, now=None) -> int:
    now = now or timezone.now()
    compared = 0
    for actor in (w.a, w.b):
        for all_lanes in (False, True):
            orm = leases.ready_queryset(actor=actor, project_id=w.project.pk, now=now, all_lanes=all_lanes).first()
            raw = leases._pick(actor=actor, project_id=w.project.pk, now=now, all_lanes=all_lanes)
            assert (raw and raw.pk) == (orm and orm.pk), (actor.runtime, all_lanes, raw, orm)
            if raw is not None:
                # The whole row comes back, converted as the ORM converts it.
                for field in ("status", "lease_expires_at", "created_at", "reclaim_count", "dispatch_rank", "title"):
                    assert getattr(raw, field) == getattr(orm, field), field
                compared += 1
    return compared


def test_pick_agrees_with_the_queryset_through_a_drain(world, clock):
    a = world.a
    blocker = new_issue(a, "blocks the urgent one", priority=4)
    new_issue(a, "urgent but blocked", priority=1, blocked_by=[blocker.identifier])
    closed_blocker = new_issue(a, "done blocker")
    new_issue(a, "blocked by a done issue", blocked_by=[closed_blocker.identifier])
    finish(a, closed_blocker.identifier)
    new_issue(a, "owner's lane", priority=2, assignee=world.owner.email)
    new_issue(a, "member's lane", priority=2, assignee=world.member.email)
    new_issue(a, "not work", work=False)
    triage = new_issue(a, "awaiting triage")
    issue_update(actor=a, identifier=triage.identifier, awaiting_triage=True)
    reviewed = new_issue(a, "submitted by the owner's agent", priority=3)
    to_review(world, reviewed.identifier)
    for n in range(3):
        new_issue(a, f"tie {n}", priority=3)  # same rank and the same (frozen) time
    expired = new_issue(a, "lease will expire", priority=2)
    leases.claim_issue(actor=world.b, identifier=expired.identifier)

    assert agree(world) == 4  # both agents, both lane modes: each has a pick
    clock.advance(hours=2)  # the member's lease on `expired` lapses: eligible again
    assert agree(world) == 4
    pulled = []
    for step in range(40):
        actor = (world.a, world.b)[step % 2]
        got = leases.next_issue(actor=actor, all_lanes=step % 3 == 0)
        if got["issue"] is None:
            actor = world.b if actor is world.a else world.a
            got = leases.next_issue(actor=actor, all_lanes=True)
            if got["issue"] is None:
                break
        pulled.append(got["issue"]["identifier"])
        agree(world)  # with a live lease in the backlog
        issue_update(actor=actor, identifier=got["issue"]["identifier"], status="done", claim_token=got["claimToken"])
        agree(world)
    # Everything dispatchable was pulled once (the review by its own submitter's agent
    # went to the other agent), and nothing is left for either.
    assert len(pulled) == len(set(pulled)) == 10, pulled
    assert agree(world) == 0
