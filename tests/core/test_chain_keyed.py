"""The keyed receipt chain (SPEC §7): HMAC links under a chain key from the master key
ring, the signed head file outside the database, the one-time re-link of old chains, and
damaged rows reported as broken links.

The attack these tests replay: someone who can write the database (not read the master
key or the data directory) rewrites entry 3, drops the last 3 entries, recomputes every
hash and sets the org's head back, so that the chain is consistent in itself.
"""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.core.management import call_command

from apps.core import chain
from apps.issues.chain import Verified, chain_relink, check_org, check_org_cached, forget_verified, verify_org
from apps.issues.models import Activity
from apps.issues.services import comment_create, issue_update
from apps.orgs.models import Org
from tests.conftest import is_postgres, new_issue
from tests.core.test_chain import _org_uuid, entries, tampering, verify


def _committed(world, django_capture_on_commit_callbacks, n=8):
    """``n`` issues created with their after-commit effects run (the head file)."""
    for i in range(n):
        with django_capture_on_commit_callbacks(execute=True):
            new_issue(world.a, f"Issue {i}")
    return Org.objects.get(pk=world.org.pk)


def _relink_by_hand(org_id, rows, link) -> str:
    """Recompute every link with ``link`` (what the attacker does); returns the new head."""
    prev = chain.GENESIS
    with tampering() as cur:
        for row in rows:
            payload = chain.canonical(
                org_id=org_id,
                seq=row.seq,
                issue_id=row.issue_id,
                principal_id=row.principal_id,
                key_id=row.key_id,
                runtime=row.runtime,
                verb=row.verb,
                created_at=row.created_at,
                changes_enc=row.changes_enc,
            )
            new = link(prev, payload)
            cur.execute("UPDATE issues_activity SET prev_hash = %s, hash = %s WHERE id = %s", [prev, new, row.pk])
            prev = new
    return prev


def _rewrite_3_and_truncate_3(world, link):
    """The attack: edit entry 3, drop the last 3 entries, recompute every hash, move the head."""
    org = world.org
    uuid = _org_uuid(org)
    n = Org.objects.get(pk=org.pk).activity_seq
    with tampering() as cur:
        cur.execute("UPDATE issues_activity SET verb = 'forged' WHERE org_id = %s AND seq = 3", [uuid])
        cur.execute("DELETE FROM issues_activity WHERE org_id = %s AND seq > %s", [uuid, n - 3])
    head = _relink_by_hand(org.pk, entries(org), link)
    Org.objects.filter(pk=org.pk).update(activity_seq=n - 3, chain_head=head)
    return n


def test_links_are_hmac_under_the_chain_key_not_plain_sha256(world):
    new_issue(world.a, "One")
    key = chain.chain_key(world.org.pk)
    assert len(key) == 32 and key != chain.chain_key(world.other_org.pk)  # one key per org
    for row in entries(world.org):
        payload = chain.canonical(
            org_id=world.org.pk,
            seq=row.seq,
            issue_id=row.issue_id,
            principal_id=row.principal_id,
            key_id=row.key_id,
            runtime=row.runtime,
            verb=row.verb,
            created_at=row.created_at,
            changes_enc=row.changes_enc,
        )
        assert row.hash == chain.link_hash(key, row.prev_hash, payload)
        assert row.hash != hashlib.sha256(bytes.fromhex(row.prev_hash) + payload).hexdigest()


def test_the_attack_with_recomputed_sha256_is_caught(world):
    """What passed before the chain key: every hash recomputed with plain SHA-256."""
    new_issue(world.a, "One")
    issue = new_issue(world.a, "Two")
    for p in (1, 2, 3, 4):
        issue_update(actor=world.a, identifier=issue.identifier, priority=p)
    _rewrite_3_and_truncate_3(world, chain.legacy_link_hash)
    code, _, err = verify("--org", world.org.slug)
    assert code == 1
    assert err.strip() == f"org {world.org.slug}: chain broken at seq 1: hash does not match the entry's content (edited)"
    code, _, err = verify("--org", world.org.slug, "--fold")
    assert code == 1 and "chain broken at seq 1" in err


def test_the_attack_with_the_right_key_but_truncated_is_caught_by_the_head_file(world, django_capture_on_commit_callbacks):
    """Even a forger holding the chain key (which the threat model rules out) cannot hide
    a truncation: the signed head file outside the database anchors the last entry."""
    _committed(world, django_capture_on_commit_callbacks)
    n = Org.objects.get(pk=world.org.pk).activity_seq
    assert chain.read_anchor(world.org.pk) == chain.Anchor(n, Org.objects.get(pk=world.org.pk).chain_head)
    key = chain.chain_key(world.org.pk)
    _rewrite_3_and_truncate_3(world, lambda prev, payload: chain.link_hash(key, prev, payload))
    code, _, err = verify("--org", world.org.slug)
    assert code == 1
    assert err.strip() == (
        f"org {world.org.slug}: chain broken at seq {n - 2}: the signed head file anchors seq {n} "
        f"but the chain ends at seq {n - 3} (entries removed)"
    )


def test_rewritten_entry_at_the_anchor_is_caught(world, django_capture_on_commit_callbacks):
    _committed(world, django_capture_on_commit_callbacks, n=3)
    n = Org.objects.get(pk=world.org.pk).activity_seq
    key = chain.chain_key(world.org.pk)
    with tampering() as cur:
        cur.execute("UPDATE issues_activity SET verb = 'forged' WHERE org_id = %s AND seq = %s", [_org_uuid(world.org), n])
    head = _relink_by_hand(world.org.pk, entries(world.org), lambda prev, payload: chain.link_hash(key, prev, payload))
    Org.objects.filter(pk=world.org.pk).update(chain_head=head)
    broken = verify_org(world.org)
    assert (broken.seq, broken.reason) == (n, "the entry differs from the one the signed head file anchors (rewritten)")


def test_a_forged_head_file_is_a_break(world, django_capture_on_commit_callbacks):
    _committed(world, django_capture_on_commit_callbacks, n=2)
    path = chain.heads_dir() / f"{world.org.pk}.head"
    doc = json.loads(path.read_text())
    doc["seq"] -= 1  # an attacker moving the anchor back to hide a truncation
    path.write_text(json.dumps(doc))
    broken = verify_org(world.org)
    assert broken.reason == "the head file's signature does not match (the head file was tampered with)"


def test_head_file_only_moves_forward(world):
    chain.write_anchor(world.org.pk, 5, "a" * 64)
    chain.write_anchor(world.org.pk, 4, "b" * 64)  # a commit that finished late
    assert chain.read_anchor(world.org.pk) == chain.Anchor(5, "a" * 64)
    chain.write_anchor(world.org.pk, 6, "c" * 64)
    assert chain.read_anchor(world.org.pk) == chain.Anchor(6, "c" * 64)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("prev_hash", "not hex at all"),
        ("hash", "zz"),
        ("created_at", "garbage"),
        ("created_at", "2026-13-45 99:99:99"),
    ],
)
def test_an_undecodable_row_is_a_broken_link_not_a_traceback(world, column, value):
    if column == "created_at" and is_postgres():
        pytest.skip("PostgreSQL's timestamp column refuses such a value itself")
    new_issue(world.a, "One")
    new_issue(world.a, "Two")
    with tampering() as cur:
        cur.execute(f"UPDATE issues_activity SET {column} = %s WHERE org_id = %s AND seq = 2", [value, _org_uuid(world.org)])
    code, out, err = verify("--org", world.org.slug, "--json")
    assert code == 1
    broken = json.loads(out)["broken"]
    assert len(broken) == 1 and broken[0]["seq"] == 2


def test_rotating_the_master_key_changes_no_link(world, settings):
    """The chain secret is re-wrapped by rewrap_keys, never replaced."""
    import base64
    import os

    new_issue(world.a, "One")
    before = chain.chain_key(world.org.pk)
    wrapped_before = (chain.keystore.keystore_dir() / chain.CHAIN_SECRET_FILE).read_bytes()
    newer = base64.urlsafe_b64encode(os.urandom(32)).decode()
    settings.RETASC_MASTER_KEY = f"{newer},{settings.RETASC_MASTER_KEY}"
    try:
        call_command("rewrap_keys", stdout=io.StringIO())
        assert (chain.keystore.keystore_dir() / chain.CHAIN_SECRET_FILE).read_bytes() != wrapped_before
        chain.clear_cache()
        assert chain.chain_key(world.org.pk) == before
        assert verify_org(world.org) is None
    finally:
        # Put the secret back under the test master key alone (the key store is shared).
        settings.RETASC_MASTER_KEY = settings.RETASC_MASTER_KEY.split(",", 1)[1] + "," + newer
        call_command("rewrap_keys", stdout=io.StringIO())
        chain.clear_cache()


# --- re-linking chains written before the chain key ------------------------------------


def _make_legacy(world) -> str:
    """Turn the org's chain into what an older release wrote: unkeyed SHA-256 links."""
    head = _relink_by_hand(world.org.pk, entries(world.org), chain.legacy_link_hash)
    Org.objects.filter(pk=world.org.pk).update(chain_keyed=False, chain_head=head)
    return head


def test_relink_chains_relinks_once_and_records_it(world, django_capture_on_commit_callbacks):
    issue = new_issue(world.a, "One")
    comment_create(actor=world.a, issue=issue.identifier, body="hello")
    legacy_head = _make_legacy(world)
    n = Org.objects.get(pk=world.org.pk).activity_seq
    broken = verify_org(world.org)
    assert broken.reason == "the chain is not linked under the chain key yet (run manage.py relink_chains)"

    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("relink_chains", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["refused"] == []
    assert [r["org"] for r in result["relinked"]] == [world.org.slug]  # the other org was keyed already
    assert result["relinked"][0]["entries"] == n and result["relinked"][0]["legacyHead"] == legacy_head

    org = Org.objects.get(pk=world.org.pk)
    assert org.chain_keyed and org.activity_seq == n + 1
    receipt = Activity.objects.get(org_id=org.pk, seq=n + 1)
    assert receipt.verb == "chain_relinked" and receipt.runtime == "system"
    assert receipt.changes == {"entries": [None, n], "legacyHead": [None, legacy_head]}
    assert verify_org(org) is None
    assert chain.read_anchor(org.pk) == chain.Anchor(n + 1, org.chain_head)

    out = io.StringIO()
    call_command("relink_chains", "--json", stdout=out)  # idempotent
    assert json.loads(out.getvalue()) == {"relinked": [], "refused": []}
    assert Org.objects.get(pk=org.pk).activity_seq == n + 1


def test_relink_refuses_a_chain_that_is_already_broken(world, unchanged):
    new_issue(world.a, "One")
    _make_legacy(world)
    with tampering() as cur:
        cur.execute("UPDATE issues_activity SET verb = 'forged' WHERE org_id = %s AND seq = 2", [_org_uuid(world.org)])
    before = [(r.prev_hash, r.hash) for r in entries(world.org)]
    with unchanged():
        with pytest.raises(SystemExit) as exc:
            call_command("relink_chains", stdout=io.StringIO(), stderr=io.StringIO())
    assert exc.value.code == 1
    assert [(r.prev_hash, r.hash) for r in entries(world.org)] == before
    assert not Org.objects.get(pk=world.org.pk).chain_keyed


def test_relink_refuses_an_org_whose_head_file_exists(world, django_capture_on_commit_callbacks, unchanged):
    """Flipping chain_keyed back in the database must not launder a rewritten chain."""
    _committed(world, django_capture_on_commit_callbacks, n=2)
    _make_legacy(world)
    with unchanged():
        with pytest.raises(SystemExit):
            call_command("relink_chains", stdout=io.StringIO(), stderr=io.StringIO())
    assert not Org.objects.get(pk=world.org.pk).chain_keyed


def test_relink_service_is_a_noop_on_a_keyed_chain(world):
    assert chain_relink(org=world.org) is None


# --- the Dash's incremental check (item 15) ---------------------------------------------


def test_incremental_check_walks_only_new_entries(world):
    forget_verified()
    for i in range(5):
        new_issue(world.a, f"Issue {i}")
    n = Org.objects.get(pk=world.org.pk).activity_seq
    first = check_org_cached(world.org)
    assert (first.broken, first.walked) == (None, n)
    again = check_org_cached(world.org)
    assert (again.broken, again.walked) == (None, 0)
    new_issue(world.a, "Later")
    new_issue(world.a, "Later still")
    third = check_org_cached(world.org)
    assert (third.broken, third.walked, third.verified.seq) == (None, 2, n + 2)


def test_incremental_check_still_catches_truncation_and_edits_at_the_head(world, django_capture_on_commit_callbacks):
    forget_verified()
    _committed(world, django_capture_on_commit_callbacks, n=4)
    assert check_org_cached(world.org).broken is None
    n = Org.objects.get(pk=world.org.pk).activity_seq
    with tampering() as cur:
        cur.execute("DELETE FROM issues_activity WHERE org_id = %s AND seq = %s", [_org_uuid(world.org), n])
    Org.objects.filter(pk=world.org.pk).update(activity_seq=n - 1, chain_head=entries(world.org)[-1].hash)
    broken = check_org_cached(world.org).broken
    assert broken is not None and broken.seq == n
    # A broken result is not cached: the next check walks again and still reports it.
    assert check_org_cached(world.org).broken is not None


def test_incremental_check_from_a_head_that_changed(world):
    new_issue(world.a, "One")
    row = entries(world.org)[-1]
    result = check_org(world.org, since=Verified(row.seq, "e" * 64))
    assert result.broken.reason == "the entry changed after it was verified (edited)"


def test_dash_issue_page_uses_the_cached_check(world, client):
    """Loading an issue page twice: the second load walks no receipts (the first did)."""
    forget_verified()
    issue = new_issue(world.a, "Shown")
    client.force_login(world.owner)
    url = f"/issues/{issue.identifier}/"
    assert client.get(url).status_code == 200
    result = check_org_cached(world.org)
    assert result.walked == 0 and result.verified.seq == Org.objects.get(pk=world.org.pk).activity_seq
