"""The receipt chain under concurrent mixed mutations (SPEC §7, §4; STYLE §4).

Many agents in one org create, comment, claim, checkpoint, heartbeat, release, edit
priorities and add blockers at once. Afterwards the chain verifies, sequence numbers are
dense 1..K, and no action failed: no deadlock between the org row lock, the org rank
lock, the project claim lock and issue row locks.
"""

from __future__ import annotations

import random

import pytest

from apps.core.chain import GENESIS
from apps.issues.chain import verify_org
from apps.issues.models import Activity, Issue
from apps.issues.services import comment_create, issue_update, relation_add
from apps.leases.services import checkpoint, heartbeat, next_batch, next_issue, release_issue
from apps.orgs.models import Org
from tests.conftest import is_postgres, make_agent, new_issue
from tests.leases.test_race import race

pytestmark = pytest.mark.slow


def _mixed_work(actor, *, own_gate, shared, rounds: int, seed: int) -> int:
    """One agent's session. Returns how many actions it completed."""
    rng = random.Random(seed)
    done = 0
    for r in range(rounds):
        issue = new_issue(actor, f"{seed}.{r}", priority=rng.choice([0, 1, 2, 3, 4]))
        comment_create(actor=actor, issue=issue.identifier, body=f"note {seed}.{r}")
        done += 2
        answer = next_issue(actor=actor)
        done += 1
        if answer["issue"] is not None:
            ident, token = answer["issue"]["identifier"], answer["claimToken"]
            checkpoint(actor=actor, identifier=ident, note=f"halfway {seed}.{r}", claim_token=token)
            heartbeat(actor=actor, identifier=ident, claim_token=token)
            done += 2
            if rng.random() < 0.5:
                release_issue(actor=actor, identifier=ident, claim_token=token, note="handing back")
                done += 1
        # Several rows claimed in one transaction, while refreshes rewrite their ranks.
        for held in next_batch(actor=actor, n=3, claim=True)["claims"]:
            release_issue(actor=actor, identifier=held["issue"]["identifier"], claim_token=held["claimToken"])
            done += 1
        done += 1
        # Rank pressure: a shared, never-dispatched issue changes priority, so every
        # refresh rewrites the effective rank of all the gates that block it...
        issue_update(actor=actor, identifier=shared, priority=1 if r % 2 else 4)
        # ...while this agent locks its own gate row to give it a new blocker.
        extra = new_issue(actor, f"{seed}.{r} prerequisite", status="blocked")
        issue_update(actor=actor, identifier=own_gate, blocked_by=[extra.identifier])
        done += 3
    return done


def test_mixed_mutations_keep_one_dense_verifiable_chain(tworld):
    # Given: one agent per thread; each owns a gate issue that blocks one shared issue,
    # and so does every backlog issue.
    threads, rounds = (16, 5) if is_postgres() else (6, 3)
    Org.objects.filter(pk=tworld.org.pk).update(claim_cap=10_000)
    agents = [make_agent(tworld.org, tworld.owner if i % 2 else tworld.member, tworld.project).actor for i in range(threads)]
    shared = new_issue(tworld.a, "Shared milestone", status="blocked")
    gates = []
    for i in range(threads):
        gate = new_issue(agents[i], f"Gate {i}", status="blocked")
        relation_add(actor=agents[i], source_id=gate.identifier, target_id=shared.identifier, type="blocks")
        gates.append(gate.identifier)
    for k in range(threads * 2):
        # Ready work that also blocks the shared issue: its rank moves with it.
        backlog = new_issue(tworld.a, f"Backlog {k}")
        relation_add(actor=tworld.a, source_id=backlog.identifier, target_id=shared.identifier, type="blocks")
    before = Org.objects.get(pk=tworld.org.pk).activity_seq

    # When
    results, errors = race(
        threads,
        lambda i: _mixed_work(agents[i], own_gate=gates[i], shared=shared.identifier, rounds=rounds, seed=i),
    )

    # Then: nothing failed, and the chain is one dense, verifiable line.
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    assert all(done >= rounds * 8 for done in results)
    org = Org.objects.get(pk=tworld.org.pk)
    assert verify_org(org) is None
    rows = list(Activity.objects.filter(org_id=org.pk).order_by("seq").values_list("seq", "prev_hash", "hash"))
    assert [seq for seq, _, _ in rows] == list(range(1, org.activity_seq + 1))
    assert rows[0][1] == GENESIS
    assert all(rows[k][1] == rows[k - 1][2] for k in range(1, len(rows)))
    assert len({h for _, _, h in rows}) == len(rows)
    assert org.chain_head == rows[-1][2]
    # Every racing action that writes a receipt wrote at least one.
    assert org.activity_seq - before >= threads * rounds * 6
    # Ranks settled: each gate inherits the shared issue's final priority rank.
    final = Issue.objects.get(pk=shared.pk).effective_rank
    gate_ranks = set(
        Issue.objects.filter(project=tworld.project, number__in=[int(g.split("-")[1]) for g in gates]).values_list(
            "effective_rank", flat=True
        )
    )
    assert gate_ranks == {final}
