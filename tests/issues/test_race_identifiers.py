"""Identifier numbers under concurrent creation (SPEC §3): no gaps, no duplicates."""

from __future__ import annotations

from collections import Counter

import pytest

from apps.issues.chain import verify_org
from apps.issues.models import Issue, Relation
from apps.orgs.models import Org, Project
from tests.conftest import is_postgres, make_agent, new_issue
from tests.leases.test_race import race

pytestmark = pytest.mark.slow


def _sizes() -> tuple[int, int]:
    # (threads, issues per thread): SQLite serializes every writer, so keep it smaller.
    return (24, 5) if is_postgres() else (8, 4)


def test_concurrent_creates_number_issues_1_to_n_without_gaps(tworld):
    # Given: a fresh project and one agent key per thread.
    threads, each = _sizes()
    agents = [make_agent(tworld.org, tworld.owner if i % 2 else tworld.member, tworld.project).actor for i in range(threads)]

    # When: every thread creates its issues at the same moment.
    results, errors = race(threads, lambda i: [new_issue(agents[i], f"T{i}.{k}").number for k in range(each)])

    # Then: numbers are exactly 1..N, each once, and the counter agrees.
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    total = threads * each
    numbers = Counter(n for batch in results for n in batch)
    assert sorted(numbers) == list(range(1, total + 1))
    assert set(numbers.values()) == {1}
    assert sorted(Issue.objects.filter(project=tworld.project).values_list("number", flat=True)) == list(range(1, total + 1))
    assert Project.objects.get(pk=tworld.project.pk).issue_seq == total
    assert verify_org(Org.objects.get(pk=tworld.org.pk)) is None


def test_concurrent_creates_with_blockers_keep_numbers_dense(tworld):
    # Given: one existing issue (number 1) that half of the new issues will name in blockedBy,
    # so creations with and without the org rank lock interleave.
    threads, each = _sizes()
    blocker = new_issue(tworld.a, "Foundation")
    agents = [make_agent(tworld.org, tworld.owner if i % 2 else tworld.member, tworld.project).actor for i in range(threads)]

    def work(i: int) -> list[int]:
        made = []
        for k in range(each):
            if (i + k) % 2:
                made.append(new_issue(agents[i], f"T{i}.{k}", blocked_by=[blocker.identifier]).number)
            else:
                made.append(new_issue(agents[i], f"T{i}.{k}").number)
        return made

    # When
    results, errors = race(threads, work)

    # Then
    assert not errors, f"{len(errors)} thread(s) failed; first:\n{errors[0][2]}" if errors else ""
    total = threads * each + 1
    numbers = sorted([1] + [n for batch in results for n in batch])
    assert numbers == list(range(1, total + 1))
    assert sorted(Issue.objects.filter(project=tworld.project).values_list("number", flat=True)) == list(range(1, total + 1))
    blocked = sum(1 for i in range(threads) for k in range(each) if (i + k) % 2)
    assert Relation.objects.filter(source=blocker, type="blocks").count() == blocked
    assert verify_org(Org.objects.get(pk=tworld.org.pk)) is None
