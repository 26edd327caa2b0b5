"""The receipt chain (SPEC §7): one entry per change, dense seq, tamper evidence, folding."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from apps.core import chain
from apps.core.errors import ServiceError
from apps.issues.chain import verify_folds, verify_org
from apps.issues.models import Activity, Issue, Label
from apps.issues.services import (
    FOLDED_FIELDS,
    comment_create,
    fold,
    issue_update,
    label_save,
    relation_add,
    state_for_fold,
)
from apps.leases import services as leases
from apps.leases.services import reclaim_expired
from apps.orgs.models import Org
from tests.conftest import is_postgres, needs_postgres, new_issue


def entries(org) -> list[Activity]:
    return list(Activity.objects.filter(org_id=org.pk).order_by("seq"))


def verify(*args) -> tuple[int, str, str]:
    """Run verify_chain; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("verify_chain", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def folded_state(issue) -> dict:
    state = fold(Activity.objects.filter(issue_id=issue.pk).order_by("seq"))
    return {f: state.get(f, [] if f == "labels" else None) for f in FOLDED_FIELDS}


def assert_folds(issue) -> None:
    row = Issue.objects.select_related("parent__project", "checkpoint").get(pk=issue.pk)
    assert folded_state(issue) == state_for_fold(row)


# --- appending ------------------------------------------------------------------------


def test_each_change_appends_one_entry_with_dense_seq(world):
    org = world.org
    start = len(entries(org))
    assert [e.seq for e in entries(org)] == list(range(1, start + 1))  # org creation is seq 1

    def appended(fn, n):
        before = len(entries(org))
        fn()
        assert len(entries(org)) - before == n

    a = new_issue(world.a, "A")
    b = new_issue(world.a, "B")
    appended(lambda: new_issue(world.a, "C"), 1)
    appended(lambda: issue_update(actor=world.a, identifier=a.identifier, title="A2", priority=2), 1)
    appended(lambda: issue_update(actor=world.a, identifier=a.identifier, title="A2"), 0)  # no change, no receipt
    appended(lambda: relation_add(actor=world.a, source_id=a.identifier, target_id=b.identifier, type="blocks"), 2)
    appended(lambda: comment_create(actor=world.b, issue=b.identifier, body="hi"), 1)
    appended(lambda: label_save(actor=world.a, name="infra"), 1)
    claim = leases.claim_issue(actor=world.b, identifier=a.identifier)
    appended(lambda: leases.heartbeat(actor=world.b, identifier=a.identifier, claim_token=claim["claimToken"]), 0)
    appended(lambda: leases.release_issue(actor=world.b, identifier=a.identifier, claim_token=claim["claimToken"], note="n"), 2)

    rows = entries(org)
    assert [e.seq for e in rows] == list(range(1, len(rows) + 1))
    for prev, entry in zip(rows, rows[1:], strict=False):
        assert entry.prev_hash == prev.hash
    org.refresh_from_db()
    assert (org.activity_seq, org.chain_head) == (rows[-1].seq, rows[-1].hash)
    last = rows[-1]
    assert (last.verb, last.principal_id, last.key_id, last.runtime) == ("released", world.member.pk, world.b.key_id, "codex")
    # The other org's chain is its own.
    assert [e.seq for e in entries(world.other_org)] == list(range(1, len(entries(world.other_org)) + 1))
    assert verify_org(org) is None and verify_org(world.other_org) is None


def test_receipt_records_who_and_before_after(world):
    issue = new_issue(world.a, "Before")
    issue_update(actor=world.b, identifier=issue.identifier, title="After", priority=1)
    entry = Activity.objects.filter(issue_id=issue.pk).order_by("-seq").first()
    assert entry.verb == "updated"
    assert entry.changes == {"title": ["Before", "After"], "priority": [0, 1]}
    assert (entry.principal_id, entry.key_id, entry.runtime) == (world.member.pk, world.b.key_id, "codex")


# --- append-only ----------------------------------------------------------------------


def test_orm_refuses_update_and_delete(world, unchanged):
    new_issue(world.a, "Keep")
    row = entries(world.org)[-1]
    with unchanged():
        with pytest.raises(PermissionError):
            Activity.objects.filter(org_id=world.org.pk).update(verb="x")
        with pytest.raises(PermissionError):
            Activity.objects.filter(org_id=world.org.pk).delete()
        with pytest.raises(PermissionError):
            row.delete()
        row.verb = "forged"
        with pytest.raises(PermissionError):
            row.save()
    assert Activity.objects.get(pk=row.pk).verb == "created"
    assert verify_org(Org.objects.get(pk=world.org.pk)) is None


@needs_postgres
@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE issues_activity SET verb = 'forged' WHERE org_id = %s",
        "DELETE FROM issues_activity WHERE org_id = %s",
    ],
)
def test_postgres_trigger_refuses_raw_update_and_delete(world, unchanged, sql):
    new_issue(world.a, "Keep")
    with unchanged():
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(sql, [world.org.pk])
    assert verify_org(Org.objects.get(pk=world.org.pk)) is None


# --- tampering directly in the database -----------------------------------------------


class tampering:
    """Raw SQL on the receipts, as someone with database access would. On PostgreSQL the
    append-only trigger has to be switched off first (and is switched back on)."""

    def __enter__(self):
        self.cur = connection.cursor().__enter__()
        if is_postgres():
            self.cur.execute("ALTER TABLE issues_activity DISABLE TRIGGER issues_activity_append_only")
        return self.cur

    def __exit__(self, *exc):
        if is_postgres():
            self.cur.execute("ALTER TABLE issues_activity ENABLE TRIGGER issues_activity_append_only")
        self.cur.__exit__(*exc)


def _org_uuid(org):
    return Org._meta.pk.get_db_prep_value(org.pk, connection)


@pytest.fixture
def chained(world):
    """Acme with a dozen receipts; verify_chain passes before any tampering."""
    a = new_issue(world.a, "One")
    b = new_issue(world.a, "Two")
    relation_add(actor=world.a, source_id=a.identifier, target_id=b.identifier, type="blocks")
    for n in range(3):
        issue_update(actor=world.a, identifier=b.identifier, priority=n + 1)
    comment_create(actor=world.a, issue=a.identifier, body="note")
    code, out, err = verify()
    assert (code, err) == (0, "")
    assert out.startswith("chain intact (")
    world.n = len(entries(world.org))
    assert world.n >= 9
    return world


def _broken(w, seq: int, reason: str) -> None:
    code, out, err = verify()
    assert code == 1
    assert err.strip() == f"org {w.org.slug}: chain broken at seq {seq}: {reason}"
    code, _, err = verify("--org", w.org.slug)
    assert code == 1 and f"chain broken at seq {seq}" in err
    code, out, _ = verify("--org", w.other_org.slug)
    assert code == 0  # the other org's chain is unaffected


def test_edited_entry(chained):
    with tampering() as cur:
        cur.execute("UPDATE issues_activity SET verb = 'forged' WHERE org_id = %s AND seq = 4", [_org_uuid(chained.org)])
    _broken(chained, 4, "hash does not match the entry's content (edited)")


def test_edited_changes_ciphertext(chained):
    row = entries(chained.org)[5]
    forged = bytearray(bytes(row.changes_enc))
    forged[-1] ^= 1
    with tampering() as cur:
        cur.execute("UPDATE issues_activity SET changes_enc = %s WHERE id = %s", [bytes(forged), row.pk])
    _broken(chained, 6, "hash does not match the entry's content (edited)")


def test_edited_and_rehashed_entry_breaks_the_next_link(chained):
    rows = entries(chained.org)
    target = rows[3]
    payload = chain.canonical(
        org_id=chained.org.pk,
        seq=target.seq,
        issue_id=target.issue_id,
        principal_id=None,
        key_id=None,
        runtime="dash",
        verb=target.verb,
        created_at=target.created_at,
        changes_enc=target.changes_enc,
    )
    with tampering() as cur:
        cur.execute(
            "UPDATE issues_activity SET principal_id = NULL, key_id = NULL, runtime = 'dash', hash = %s WHERE id = %s",
            [chain.link_hash(chain.chain_key(chained.org.pk), target.prev_hash, payload), target.pk],
        )
    _broken(chained, 5, "prevHash does not match the previous entry's hash (reordered or replaced)")


def test_deleted_entry(chained):
    with tampering() as cur:
        cur.execute("DELETE FROM issues_activity WHERE org_id = %s AND seq = 3", [_org_uuid(chained.org)])
    _broken(chained, 3, "expected seq 3, found 4 (an entry is missing or inserted)")


def test_deleted_last_entry(chained):
    n = chained.n
    with tampering() as cur:
        cur.execute("DELETE FROM issues_activity WHERE org_id = %s AND seq = %s", [_org_uuid(chained.org), n])
    _broken(chained, n, f"the chain ends at seq {n - 1} but the org's head is seq {n} (entries removed)")


def test_inserted_entry_even_with_valid_hashes(chained):
    """A forger appends an entry with a correct hash: the org's head gives it away."""
    last = entries(chained.org)[-1]
    n = chained.n + 1
    payload = chain.canonical(
        org_id=chained.org.pk,
        seq=n,
        issue_id=None,
        principal_id=None,
        key_id=None,
        runtime="dash",
        verb="forged",
        created_at=last.created_at,
        changes_enc=last.changes_enc,
    )
    with tampering() as cur:
        cur.execute(
            "INSERT INTO issues_activity (org_id, seq, issue_id, principal_id, key_id, runtime, verb, changes_enc,"
            " created_at, prev_hash, hash) VALUES (%s, %s, NULL, NULL, NULL, 'dash', 'forged', %s, %s, %s, %s)",
            [
                _org_uuid(chained.org),
                n,
                bytes(last.changes_enc),
                last.created_at,
                last.hash,
                chain.link_hash(chain.chain_key(chained.org.pk), last.hash, payload),
            ],
        )
    _broken(chained, n + 1, f"the chain ends at seq {n} but the org's head is seq {n - 1} (entries appended past the head)")


def test_inserted_entry_in_the_middle(chained):
    org = _org_uuid(chained.org)
    with tampering() as cur:
        # Make room at seq 4 by shifting the tail up (two steps: seq is unique per org).
        cur.execute("UPDATE issues_activity SET seq = -seq - 1 WHERE org_id = %s AND seq >= 4", [org])
        cur.execute("UPDATE issues_activity SET seq = -seq WHERE org_id = %s AND seq < 0", [org])
        third = entries(chained.org)[2]
        cur.execute(
            "INSERT INTO issues_activity (org_id, seq, issue_id, principal_id, key_id, runtime, verb, changes_enc,"
            " created_at, prev_hash, hash) VALUES (%s, 4, NULL, NULL, NULL, 'dash', 'forged', %s, %s, %s, %s)",
            [org, bytes(third.changes_enc), third.created_at, third.hash, "f" * 64],
        )
    _broken(chained, 4, "hash does not match the entry's content (edited)")


def test_reordered_entries(chained):
    org = _org_uuid(chained.org)
    with tampering() as cur:
        cur.execute("UPDATE issues_activity SET seq = -1 WHERE org_id = %s AND seq = 5", [org])
        cur.execute("UPDATE issues_activity SET seq = 5 WHERE org_id = %s AND seq = 6", [org])
        cur.execute("UPDATE issues_activity SET seq = 6 WHERE org_id = %s AND seq = -1", [org])
    _broken(chained, 5, "prevHash does not match the previous entry's hash (reordered or replaced)")


def test_json_output(chained):
    code, out, _ = verify("--json")
    assert code == 0 and '"ok": true' in out
    with tampering() as cur:
        cur.execute("UPDATE issues_activity SET runtime = 'x' WHERE org_id = %s AND seq = 2", [_org_uuid(chained.org)])
    code, out, _ = verify("--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    assert doc["broken"] == [{"org": chained.org.slug, "seq": 2, "reason": "hash does not match the entry's content (edited)"}]


def test_unknown_org(world):
    code, _, err = verify("--org", "nope")
    assert code == 2 and "There is no org 'nope'" in err


# --- folding (drift detection) --------------------------------------------------------


def test_fold_rebuilds_the_issue_after_a_long_mixed_history(world, clock):
    w = world
    container = new_issue(w.a, "Container", work=False)
    issue = new_issue(
        w.a,
        "Fold me",
        body="b0",
        labels=["x"],
        acceptance=["tests pass"],
        priority=2,
        due_at="2030-01-01",
    )
    assert_folds(issue)
    ident = issue.identifier
    issue_update(
        actor=w.a,
        identifier=ident,
        title="Fold me 2",
        body="b1",
        priority=1,
        labels=["x", "y"],
        assignee=w.member.email,
        parent=container.identifier,
        due_at=None,
    )
    assert_folds(issue)
    first = leases.claim_issue(actor=w.a, identifier=ident)
    leases.checkpoint(actor=w.a, identifier=ident, note="half way", claim_token=first["claimToken"])
    assert_folds(issue)
    leases.release_issue(actor=w.a, identifier=ident, claim_token=first["claimToken"], note="handing off")
    assert_folds(issue)
    leases.claim_issue(actor=w.b, identifier=ident)
    clock.advance(seconds=w.org.lease_ttl + 1)
    assert reclaim_expired() == 1  # the system job: reclaimCount 1, doing -> todo
    assert_folds(issue)
    second = leases.claim_issue(actor=w.b, identifier=ident)
    clock.advance(seconds=w.org.lease_ttl + 1)
    third = leases.next_issue(actor=w.a, all_lanes=True)  # takes the expired lease: reclaim + claim in one go
    assert third["issue"]["identifier"] == ident and third["reclaimCount"] == 2
    assert_folds(issue)
    token = third["claimToken"]
    with pytest.raises(ServiceError) as lost:
        leases.heartbeat(actor=w.b, identifier=ident, claim_token=second["claimToken"])
    assert lost.value.code == "CLAIM_LOST"
    leases.checkpoint(actor=w.a, identifier=ident, note="nearly", claim_token=token)
    issue_update(actor=w.a, identifier=ident, claim_token=token, evidence=["ran the suite"], labels=[])
    issue_update(actor=w.a, identifier=ident, claim_token=token, status="done")
    assert_folds(issue)
    issue_update(actor=w.a, identifier=ident, status="todo")  # reopened
    issue_update(actor=w.a, identifier=ident, cancel_reason="not needed", status="canceled")
    assert_folds(issue)
    issue_update(actor=w.a, identifier=ident, status="todo", parent=None, assignee=None)
    assert_folds(issue)
    row = Issue.objects.get(pk=issue.pk)
    assert (row.status, row.reclaim_count, row.cancel_reason, row.checkpoint_id) == ("todo", 2, None, None)
    assert folded_state(issue)["title"] == "Fold me 2"
    assert verify_folds(Org.objects.get(pk=w.org.pk)) == []
    code, out, err = verify("--fold")
    assert (code, err) == (0, "")
    assert "every issue matches its receipts" in out


def test_fold_drift_is_reported(world):
    issue = new_issue(world.a, "Drift", labels=["a"], priority=2)
    other = new_issue(world.a, "Fine")
    assert verify("--fold")[0] == 0
    prep = Issue._meta.pk.get_db_prep_value(issue.pk, connection)
    with connection.cursor() as cur:
        # Behind the services' back: no receipt. The chain itself stays intact.
        cur.execute("UPDATE issues_issue SET priority = 4, status = 'done' WHERE id = %s", [prep])
        label = Label.objects.create(org=world.org, name="sneaky")
        cur.execute("INSERT INTO issues_issue_labels (issue_id, label_id) VALUES (%s, %s)", [prep, label.pk])
    assert verify_org(Org.objects.get(pk=world.org.pk)) is None
    assert verify()[0] == 0  # without --fold only the chain is checked
    code, _, err = verify("--fold")
    assert code == 1
    assert (
        err.strip()
        == f"org {world.org.slug}: {issue.identifier} no longer matches its receipts (fields: status, priority, labels)"
    )
    assert other.identifier not in err
    assert "Drift" not in err  # names fields, never content


def test_a_failed_rank_refresh_after_commit_does_not_fail_the_action(world, monkeypatch):
    """The write committed; a refresh error defers the ranks instead of raising."""
    from django.db import DatabaseError

    from apps.issues.models import Issue
    from apps.leases import services as leases
    from apps.work import writer
    from tests.conftest import new_issue

    def broken(**kwargs):
        raise DatabaseError("deadlock detected")

    monkeypatch.setattr(writer, "ranks_refresh", broken)
    blocker = new_issue(world.a, "Blocker", priority=4)
    urgent = new_issue(world.a, "Urgent", priority=1, blocked_by=[blocker.identifier])
    assert Issue.objects.filter(pk__in=[blocker.pk, urgent.pk], rank_dirty=True).count() == 2
    monkeypatch.undo()

    # the next pull catches up and hands out the blocker with the inherited urgency
    claim = leases.next_issue(actor=world.a)
    assert claim["issue"]["identifier"] == blocker.identifier
    assert claim["issue"]["effectivePriority"] == 1
    assert not Issue.objects.filter(rank_dirty=True).exists()
