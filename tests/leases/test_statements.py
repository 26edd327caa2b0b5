"""How many statements one agent work cycle sends: authenticate, ``next_issue``,
authenticate, ``save_issue status=done`` (what ``bench.profile_claim`` measures).

A deterministic count, on each database, that fails when a change adds a statement to
the hottest path (docs/benchmarks.md, "Statements per claim + finish"). Real commits
(``tworld``), so BEGIN and COMMIT are counted as the server sends them. The same cycle's
effects are checked too: the claim row ended, the receipts chained, the ranks as a
refresh would leave them.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.billing.models import LedgerEntry
from apps.issues import chain
from apps.issues.models import Activity, Claim, Issue
from apps.issues.ranking import ranks_refresh
from apps.orgs.services import agent_key_authenticate
from apps.tools import operations as ops
from tests.conftest import is_postgres, needs_postgres, new_issue

# auth 1; next_issue 7 (BEGIN, project lock with the rank catch-up check, pick with the
# cap count, claim row + issue mark, org row, ledger + receipt + counters with the
# answer's read, COMMIT); auth 1; done 6 (BEGIN, the issue with its claim and edges,
# outbox reachability, claim end + issue row with the org row, ledger + receipt +
# counters with the answer's read, COMMIT).
POSTGRES = {"next_issue": 7, "done": 6, "total": 15}
# SQLite sends one statement per write (no data-modifying CTEs) and checks the ranks
# before the transaction; the answer's edges and labels come with its read there too.
SQLITE = {"next_issue": 11, "done": 11, "total": 24}


def cycle(w):
    counts = {}
    with CaptureQueriesContext(connection) as q:
        actor = agent_key_authenticate(w.owner_agent.raw)
        start = len(q.captured_queries)
        got = ops.next_issue(actor)
        counts["next_issue"] = len(q.captured_queries) - start
        actor = agent_key_authenticate(w.owner_agent.raw)
        start = len(q.captured_queries)
        done = ops.save_issue(actor, identifier=got["issue"]["identifier"], status="done", claimToken=got["claimToken"])
        counts["done"] = len(q.captured_queries) - start
    counts["total"] = len(q.captured_queries)
    return got, done, counts, [c["sql"] for c in q.captured_queries]


def test_a_claim_and_finish_stay_within_their_statements(tworld):
    w = tworld
    for n in range(3):
        new_issue(w.a, f"work {n}")
    cycle(w)  # warm: first-use reads (content types, caches) are not the steady state
    got, done, counts, statements = cycle(w)
    expected = POSTGRES if is_postgres() else SQLITE
    assert counts == expected, "\n".join(statements)

    # What the cycle did is all there.
    assert done["status"] == "done" and done["claim"] is None
    issue = Issue.objects.get(project=w.project, number=int(got["issue"]["identifier"].split("-")[1]))
    assert issue.lease_claim_id is None and issue.closed_at is not None
    claim = Claim.objects.get(issue=issue)
    assert claim.ended_at is not None and claim.end_reason == "finished"
    verbs = list(Activity.objects.filter(issue=issue).order_by("seq").values_list("verb", flat=True))
    assert verbs[-2:] == ["claimed", "finished"]
    assert LedgerEntry.objects.filter(org=w.org, action__in=["next_issue", "issue_edit"]).count() == 4
    assert chain.verify_org(w.org) is None
    # The ranks written with the finish (no refresh transaction) are the refresh's own.
    assert ranks_refresh(org_id=w.org.pk, issue_ids=[issue.pk]) == 0


def test_closing_a_blocked_issue_still_refreshes_its_blocker(tworld):
    """An issue in a blocks edge takes the refresh path: when it closes, its blocker
    loses the urgency it inherited from it."""
    w = tworld
    blocker = new_issue(w.a, "blocker", priority=4)
    urgent = new_issue(w.a, "urgent", priority=1, blocked_by=[blocker.identifier])
    blocker.refresh_from_db()
    assert blocker.effective_rank == 1  # inherited from the urgent issue it blocks
    with CaptureQueriesContext(connection) as q:
        ops.save_issue(w.a, identifier=urgent.identifier, status="canceled", cancelReason="not needed any more")
    assert any("WITH RECURSIVE anc" in c["sql"] for c in q.captured_queries)  # the refresh ran
    blocker.refresh_from_db()
    assert blocker.effective_rank == 4 and blocker.dispatch_rank == 9
    assert ranks_refresh(org_id=w.org.pk, issue_ids=[urgent.pk, blocker.pk]) == 0


def test_a_pull_that_finds_ranks_to_catch_up_redoes_itself_once(tworld):
    """On PostgreSQL the catch-up check rides on the project lock: when it finds work,
    the pull is rolled back, the ranks caught up, and the pull redone; one claim, one
    charge, one receipt, and the now most urgent issue is the one handed out."""
    w = tworld
    new_issue(w.a, "ordinary")
    late = new_issue(w.a, "made urgent behind the ranks' back")
    Issue.objects.filter(pk=late.pk).update(priority=1, rank_dirty=True)  # as a crash would leave it
    charges = LedgerEntry.objects.filter(org=w.org, action="next_issue").count()
    got = ops.next_issue(w.a)
    assert got["issue"]["identifier"] == late.identifier
    assert got["issue"]["effectivePriority"] == 1
    assert Claim.objects.filter(org=w.org).count() == 1
    assert LedgerEntry.objects.filter(org=w.org, action="next_issue").count() == charges + 1
    assert list(Activity.objects.filter(org=w.org, verb="claimed").values_list("issue_id", flat=True)) == [late.pk]
    assert not Issue.objects.filter(org=w.org, rank_dirty=True).exists()
    assert chain.verify_org(w.org) is None


@needs_postgres
def test_the_cycles_statements_are_prepared_on_postgres(tworld):
    """Server-side binding with psycopg's prepared statements (settings, RETASC_DB_PREPARED):
    after a few cycles PostgreSQL plans a claim + finish from prepared statements instead
    of parsing and planning every statement anew. With client-side binding (Django's
    default) nothing is ever prepared and this fails."""
    w = tworld
    for n in range(12):
        new_issue(w.a, f"work {n}")
    for _ in range(7):  # psycopg prepares a statement on its fifth run on a connection
        cycle(w)

    def plans():
        with connection.cursor() as cur:
            cur.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")
            return dict(cur.fetchall())

    before = plans()
    cycle(w)
    after = plans()
    assert any("pg_advisory_xact_lock" in s for s in after), "the pick was not prepared"
    assert any('INSERT INTO "billing_ledgerentry"' in s for s in after), "the receipt and ledger write was not prepared"
    ran_prepared = [s for s, n in after.items() if n > before.get(s, 0)]
    # The key checks, the project lock, the pick, the claim, the org row, the writes, the
    # finish: at least nine of the cycle's thirteen statements besides BEGIN and COMMIT.
    assert len(ran_prepared) >= 9, ran_prepared


@needs_postgres
@pytest.mark.django_db
def test_a_bulk_insert_past_the_protocols_parameter_limit_goes_out_in_batches(world):
    """Server-side binding carries at most 65,535 parameters per statement; a bulk insert
    larger than that (22,000 search rows of 3 columns: 66,000 values) is split by the
    backend (apps.core.postgresql) instead of failing."""
    from apps.issues.models import SearchTerm

    issue = new_issue(world.a, "many terms")
    before = SearchTerm.objects.count()
    rows = [SearchTerm(org_id=world.org.pk, issue_id=issue.pk, term=n.to_bytes(16, "big")) for n in range(22_000)]
    with CaptureQueriesContext(connection) as q:
        SearchTerm.objects.bulk_create(rows)
    assert SearchTerm.objects.count() == before + 22_000
    assert len([c for c in q.captured_queries if c["sql"].startswith('INSERT INTO "issues_searchterm"')]) == 2


@needs_postgres
def test_prepared_statements_survive_a_column_added_by_a_migration(tworld):
    """An upgrade migrates while the old processes still serve (deploy/README.md). A
    prepared ``SELECT i.*`` fails for good once its table gains a column ("cached plan
    must not change result type"); the cycle's statements name their columns instead."""
    import psycopg
    from django.conf import settings

    w = tworld
    for n in range(12):
        new_issue(w.a, f"work {n}")
    for _ in range(6):
        cycle(w)  # prepared by now (the test above)
    db = settings.DATABASES["default"]
    other = psycopg.connect(
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        user=db["USER"] or None,
        dbname=connection.settings_dict["NAME"],
        autocommit=True,
    )
    try:
        for table in ("issues_issue", "leases_claim", "orgs_org", "orgs_agentkey", "issues_activity"):
            other.execute(f"ALTER TABLE {table} ADD COLUMN upgrade_probe integer DEFAULT 0")
        got, done, _, _ = cycle(w)
        assert done["status"] == "done"
        again = ops.get_issue(agent_key_authenticate(w.owner_agent.raw), identifier=got["issue"]["identifier"])
        assert again["status"] == "done"
    finally:
        for table in ("issues_issue", "leases_claim", "orgs_org", "orgs_agentkey", "issues_activity"):
            other.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS upgrade_probe")
        other.close()
