"""Envelope encryption (SPEC §8): seal/open, binding to place, master key rotation."""

from __future__ import annotations

import base64
import os
from contextlib import contextmanager

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from apps.core import crypto, keystore
from apps.issues.models import Comment, Issue
from apps.issues.services import comment_create
from tests.conftest import build_world, new_issue


def _key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def _raw_set(table: str, column: str, value: bytes, pk) -> None:
    """Write a column directly, as someone with database access would."""
    model = {"issues_issue": Issue, "issues_comment": Comment}[table]
    prep = model._meta.pk.get_db_prep_value(pk, connection)
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s", [value, prep])


def _raw_get(table: str, column: str, pk) -> bytes:
    model = {"issues_issue": Issue, "issues_comment": Comment}[table]
    prep = model._meta.pk.get_db_prep_value(pk, connection)
    with connection.cursor() as cur:
        cur.execute(f"SELECT {column} FROM {table} WHERE id = %s", [prep])
        return bytes(cur.fetchone()[0])


# --- primitives -----------------------------------------------------------------------


def test_seal_round_trip():
    key = crypto.new_data_key()
    where = crypto.aad("org-1", "t", "f", "row-1")
    blob = crypto.seal(key, "héllo wörld ✓".encode(), where)
    assert "héllo".encode() not in blob
    assert crypto.open_sealed(key, blob, where, where="t.f of row row-1").decode() == "héllo wörld ✓"


def test_nonces_are_unique_across_many_seals():
    key = crypto.new_data_key()
    where = crypto.aad("org-1", "t", "f", "row-1")
    blobs = [crypto.seal(key, b"same plaintext", where) for _ in range(20_000)]
    nonces = {b[1 : 1 + crypto.NONCE_BYTES] for b in blobs}
    assert len(nonces) == 20_000
    assert len(set(blobs)) == 20_000  # same plaintext, different ciphertext every time


@pytest.mark.parametrize("position", [0, 5, 20, -1])
def test_any_flipped_byte_fails_authentication(position):
    key = crypto.new_data_key()
    where = crypto.aad("o", "t", "f", "r")
    blob = bytearray(crypto.seal(key, b"secret", where))
    blob[position] ^= 0x01
    with pytest.raises(crypto.IntegrityError):
        crypto.open_sealed(key, bytes(blob), where, where="t.f of row r")


def test_truncated_ciphertext_is_refused():
    with pytest.raises(crypto.IntegrityError, match="malformed"):
        crypto.open_sealed(crypto.new_data_key(), b"\x01abc", b"x", where="t.f of row r")


# --- sealed columns in the database ---------------------------------------------------


def test_model_attributes_round_trip_through_ciphertext(world):
    issue = new_issue(world.a, "Round trip", body="the body", acceptance=["one", "two"])
    keystore.clear_cache()  # read back through the key store, not the cache
    again = Issue.objects.get(pk=issue.pk)
    assert (again.title, again.body, again.acceptance) == ("Round trip", "the body", ["one", "two"])
    assert b"Round trip" not in bytes(again.title_enc)


def test_tampered_row_raises_integrity_error_naming_the_place(world):
    issue = new_issue(world.a, "Tamper me")
    blob = bytearray(_raw_get("issues_issue", "title_enc", issue.pk))
    blob[len(blob) // 2] ^= 0xFF
    _raw_set("issues_issue", "title_enc", bytes(blob), issue.pk)

    row = Issue.objects.get(pk=issue.pk)
    with pytest.raises(crypto.IntegrityError) as err:
        row.title  # noqa: B018 - the read is the test
    assert str(err.value) == f"ciphertext of issues_issue.title of row {issue.pk} failed authentication (tampered or moved)"
    # The untouched fields of the same row still read.
    assert row.body is None


def test_ciphertext_moved_to_another_row_of_the_same_org_fails(world):
    first = new_issue(world.a, "First secret")
    second = new_issue(world.a, "Second secret")
    _raw_set("issues_issue", "title_enc", _raw_get("issues_issue", "title_enc", first.pk), second.pk)
    with pytest.raises(crypto.IntegrityError, match=f"issues_issue.title of row {second.pk}"):
        Issue.objects.get(pk=second.pk).title  # noqa: B018


def test_ciphertext_moved_to_another_field_fails(world):
    issue = new_issue(world.a, "Title text", body="Body text")
    _raw_set("issues_issue", "body_enc", _raw_get("issues_issue", "title_enc", issue.pk), issue.pk)
    with pytest.raises(crypto.IntegrityError, match=f"issues_issue.body of row {issue.pk}"):
        Issue.objects.get(pk=issue.pk).body  # noqa: B018


def test_ciphertext_moved_to_another_orgs_row_fails(world):
    mine = new_issue(world.a, "Acme secret")
    theirs = new_issue(world.x, "Globex issue")
    _raw_set("issues_issue", "title_enc", _raw_get("issues_issue", "title_enc", mine.pk), theirs.pk)
    with pytest.raises(crypto.IntegrityError, match=f"issues_issue.title of row {theirs.pk}"):
        Issue.objects.get(pk=theirs.pk).title  # noqa: B018


def test_comment_moved_between_orgs_fails(world):
    mine = comment_create(actor=world.a, issue=new_issue(world.a).identifier, body="acme only")
    theirs = comment_create(actor=world.x, issue=new_issue(world.x).identifier, body="globex")
    _raw_set("issues_comment", "body_enc", _raw_get("issues_comment", "body_enc", mine.pk), theirs.pk)
    with pytest.raises(crypto.IntegrityError, match=f"issues_comment.body of row {theirs.pk}"):
        Comment.objects.get(pk=theirs.pk).body  # noqa: B018


# --- master key ring ------------------------------------------------------------------


def test_ring_wraps_with_newest_and_unwraps_with_any():
    old, new = _key(), _key()
    data_key = crypto.new_data_key()
    wrapped = crypto.MasterKeyRing.parse(old).wrap(data_key, org_ref="o1")
    rotated = crypto.MasterKeyRing.parse(f"{new},{old}")
    assert rotated.unwrap(wrapped, org_ref="o1") == data_key
    assert not rotated.wrapped_by_newest(wrapped)
    rewrapped = rotated.wrap(data_key, org_ref="o1")
    assert crypto.MasterKeyRing.parse(new).unwrap(rewrapped, org_ref="o1") == data_key


def test_wrong_ring_is_a_config_error_not_garbage():
    wrapped = crypto.MasterKeyRing.parse(_key()).wrap(crypto.new_data_key(), org_ref="o1")
    with pytest.raises(crypto.CryptoConfigError, match="not in RETASC_MASTER_KEY"):
        crypto.MasterKeyRing.parse(_key()).unwrap(wrapped, org_ref="o1")


def test_wrapped_key_bound_to_its_org():
    ring = crypto.MasterKeyRing.parse(_key())
    wrapped = ring.wrap(crypto.new_data_key(), org_ref="o1")
    with pytest.raises(crypto.IntegrityError, match="org o2 failed authentication"):
        ring.unwrap(wrapped, org_ref="o2")


@pytest.mark.parametrize("value", ["not-base64!", "c2hvcnQ=", base64.urlsafe_b64encode(b"x" * 33).decode(), ","])
def test_bad_master_key_value_is_one_clear_sentence(value):
    with pytest.raises(crypto.CryptoConfigError) as err:
        crypto.MasterKeyRing.parse(value)
    message = str(err.value)
    assert message.startswith("RETASC_MASTER_KEY ")
    assert "\n" not in message and message.endswith(".")
    assert value.strip(",") == "" or value not in message  # never echo the secret back


def test_second_entry_named_when_bad():
    with pytest.raises(crypto.CryptoConfigError, match="entry 2 is not a base64 encoding of 32 bytes"):
        crypto.MasterKeyRing.parse(f"{_key()},nope")


@pytest.fixture
def own_keystore(tmp_path):
    """A key store of its own, so rotating keys never touches other tests' orgs."""
    with override_settings(RETASC_KEYSTORE_DIR=str(tmp_path / "keys")):
        keystore.clear_cache()
        yield tmp_path / "keys"
    keystore.clear_cache()


def _read_all(issues, comments):
    keystore.clear_cache()
    return (
        [Issue.objects.get(pk=i.pk).title for i in issues],
        [Comment.objects.get(pk=c.pk).body for c in comments],
    )


def test_rotation_with_rewrap_keys(db, own_keystore):
    old, new = _key(), _key()
    with override_settings(RETASC_MASTER_KEY=old):
        keystore.check_master_key()
        w = build_world()
        issues = [new_issue(w.a, "Acme under old"), new_issue(w.x, "Globex under old")]
        comments = [comment_create(actor=w.a, issue=issues[0].identifier, body="comment under old")]
        expected = _read_all(issues, comments)
    assert expected == (["Acme under old", "Globex under old"], ["comment under old"])
    org_files = sorted(p.name for p in own_keystore.glob("*.key"))
    assert org_files == sorted([f"{w.org.pk}.key", f"{w.other_org.pk}.key"])

    # "new,old": the old key still unwraps; new orgs are wrapped by the new key.
    with override_settings(RETASC_MASTER_KEY=f"{new},{old}"):
        assert _read_all(issues, comments) == expected
        ring = keystore.ring()
        before = {p.name: p.read_bytes() for p in own_keystore.glob("*.key")}
        assert not any(ring.wrapped_by_newest(b) for b in before.values())

        call_command("rewrap_keys")

        after = {p.name: p.read_bytes() for p in own_keystore.glob("*.key")}
        assert after.keys() == before.keys()
        assert all(ring.wrapped_by_newest(b) for b in after.values())
        assert crypto.MasterKeyRing.parse(new).unwrap((own_keystore / "canary").read_bytes(), org_ref="canary")
        assert _read_all(issues, comments) == expected

    # The new key alone now opens everything; the old alone opens nothing.
    with override_settings(RETASC_MASTER_KEY=new):
        keystore.check_master_key()
        assert _read_all(issues, comments) == expected
    with override_settings(RETASC_MASTER_KEY=old):
        with pytest.raises(crypto.CryptoConfigError, match="not in RETASC_MASTER_KEY"):
            _read_all(issues, comments)
        with pytest.raises(crypto.CryptoConfigError, match="does not match"):
            keystore.check_master_key()


def test_rewrap_keys_is_idempotent_and_reports_counts(db, own_keystore, capsys):
    old, new = _key(), _key()
    with override_settings(RETASC_MASTER_KEY=old):
        build_world()
    with override_settings(RETASC_MASTER_KEY=f"{new},{old}"):
        call_command("rewrap_keys", "--json")
        call_command("rewrap_keys", "--json")
    first, second = capsys.readouterr().out.strip().splitlines()
    # Two orgs' data keys and the receipt chain's secret (apps.core.chain).
    assert first == '{"keys": 3, "rewrapped": 3}'
    assert second == '{"keys": 3, "rewrapped": 0}'


def test_rewrap_without_the_old_key_fails_and_changes_nothing(db, own_keystore):
    old = _key()
    with override_settings(RETASC_MASTER_KEY=old):
        build_world()
    before = {p.name: p.read_bytes() for p in own_keystore.glob("*.key")}
    with override_settings(RETASC_MASTER_KEY=_key()):
        with pytest.raises(crypto.CryptoConfigError):
            call_command("rewrap_keys")
    assert {p.name: p.read_bytes() for p in own_keystore.glob("*.key")} == before


def test_rewrap_never_resurrects_a_destroyed_key(db, own_keystore, monkeypatch):
    """An org deleted while rewrap_keys runs stays shredded (the delete lands between
    listing the key store and re-wrapping that org's key)."""
    old, new = _key(), _key()
    with override_settings(RETASC_MASTER_KEY=old):
        w = build_world()
    victim = own_keystore / f"{w.org.pk}.key"
    real_lock = keystore.store_lock

    @contextmanager
    def delete_lands_first():
        if victim.exists():
            victim.unlink()  # what data_key_destroy does, from another process
        with real_lock():
            yield

    monkeypatch.setattr(keystore, "store_lock", delete_lands_first)
    with override_settings(RETASC_MASTER_KEY=f"{new},{old}"):
        call_command("rewrap_keys")
    assert not victim.exists()
    assert (own_keystore / f"{w.other_org.pk}.key").exists()
