"""Claims under real concurrency (SPEC §4): threads behind a barrier, real commits.

Every issue is held by exactly one claim, no claim is lost, no thread sees an error
(no deadlock, no "database is locked"), and the receipt chain stays whole.
"""

from __future__ import annotations

import threading
import traceback
from collections import Counter

import pytest
from django.conf import settings
from django.db import connection

from apps.issues.chain import verify_org
from apps.issues.models import Activity, Claim, Issue
from apps.leases.services import next_issue
from apps.orgs.models import Org
from tests.conftest import is_postgres, make_agent, needs_postgres, new_issue

pytestmark = pytest.mark.slow

needs_sqlite = pytest.mark.skipif(
    "sqlite" not in settings.DATABASES["default"]["ENGINE"],
    reason="the SQLite variant of the race (the PostgreSQL one runs on PostgreSQL)",
)


def race(n: int, work) -> tuple[list, list]:
    """Run ``work(i)`` in n threads released together. Returns (results, errors)."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the assertion
            errors.append((i, repr(exc), traceback.format_exc()))
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,), name=f"race-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a racing thread hung (deadlock?)"
    return results, errors


def _pull_until_empty(actor) -> list[str]:
    taken = []
    while True:
        answer = next_issue(actor=actor)
        if answer["issue"] is None:
            return taken
        taken.append(answer["issue"]["identifier"])


def _claim_race(tw, *, threads: int, issues: int) -> None:
    # Given: a project with `issues` ready issues and `threads` agents, each its own key,
    # with a claim cap that never gets in the way.
    Org.objects.filter(pk=tw.org.pk).update(claim_cap=10_000)
    for k in range(issues):
        new_issue(tw.a, f"Ready {k}")
    agents = [make_agent(tw.org, tw.owner if i % 2 else tw.member, tw.project).actor for i in range(threads)]
    assert agents[0].org.effective_claim_cap == 10_000
    expected = set(Issue.objects.filter(project=tw.project).values_list("number", flat=True))
    assert len(expected) == issues

    # When: they all pull at once until the queue is empty.
    results, errors = race(threads, lambda i: _pull_until_empty(agents[i]))

    # Then: no thread failed, every issue was handed out exactly once, none lost.
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    handed = Counter(ident for taken in results for ident in taken)
    assert sum(handed.values()) == issues
    assert max(handed.values()) == 1
    assert {int(ident.split("-")[1]) for ident in handed} == expected
    per_issue = Counter(Claim.objects.filter(org_id=tw.org.pk).values_list("issue_id", flat=True))
    assert len(per_issue) == issues
    assert set(per_issue.values()) == {1}
    # Each thread's own answers agree with the claims its key holds.
    for actor, taken in zip(agents, results, strict=True):
        assert Claim.objects.filter(key_id=actor.key_id, ended_at__isnull=True).count() == len(taken)
    rows = Issue.objects.filter(project=tw.project)
    assert rows.filter(status="doing", lease_claim_id__isnull=False).count() == issues
    assert {r.lease_claim_id for r in rows} == set(Claim.objects.filter(org_id=tw.org.pk).values_list("pk", flat=True))
    org = Org.objects.get(pk=tw.org.pk)
    assert verify_org(org) is None
    seqs = list(Activity.objects.filter(org_id=org.pk).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, org.activity_seq + 1))
    assert Activity.objects.filter(org_id=org.pk, verb="claimed").count() == issues


@needs_postgres
def test_claim_race_postgres_every_issue_claimed_exactly_once(tworld):
    assert is_postgres()
    _claim_race(tworld, threads=32, issues=300)


@needs_sqlite
def test_claim_race_sqlite_every_issue_claimed_exactly_once(tworld):
    _claim_race(tworld, threads=8, issues=60)
