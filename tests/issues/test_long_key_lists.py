"""``pk IN (...)`` with more keys than a statement may carry parameters (apps.core.sql.marks).

Server-side binding on PostgreSQL allows 65,535 parameters per statement and SQLite
32,766; a whole org's SLA escalations can name more issues than that. Past
``ARRAY_PAST`` keys the list travels as one parameter, on both databases.
"""

from __future__ import annotations

import uuid

from django.db import connection

from apps.core import sql
from apps.issues.models import Issue
from apps.issues.ranking import ranks_refresh
from tests.conftest import new_issue

MANY = 70_000  # past both databases' limits


def test_seventy_thousand_keys_in_one_statement(world):
    real = [new_issue(world.a, f"real {n}") for n in range(3)]
    keys = [i.pk for i in real] + [uuid.uuid4() for _ in range(MANY)]
    in_keys, params = sql.marks(Issue, keys)
    assert len(params) == 1
    with connection.cursor() as cur:
        cur.execute(f"SELECT id FROM {Issue._meta.db_table} WHERE id IN ({in_keys})", params)
        found = {uuid.UUID(str(row[0])) for row in cur.fetchall()}
    assert found == {i.pk for i in real}
    # A short list keeps one parameter per key (the statement text of the hot paths).
    short, short_params = sql.marks(Issue, keys[:3])
    assert short == "%s, %s, %s" and len(short_params) == 3


def test_a_refresh_named_by_seventy_thousand_ids(world):
    blocker = new_issue(world.a, "blocker", priority=4)
    urgent = new_issue(world.a, "urgent", priority=1, blocked_by=[blocker.identifier])
    Issue.objects.filter(pk=urgent.pk).update(priority=4)
    Issue.objects.filter(pk=blocker.pk).update(effective_rank=1)  # stale: inherited from the urgent issue
    ranks_refresh(org_id=world.org.pk, issue_ids=[urgent.pk, *(uuid.uuid4() for _ in range(MANY))])
    blocker.refresh_from_db()
    urgent.refresh_from_db()
    assert blocker.effective_rank == urgent.effective_rank == urgent.base_rank
