"""No plaintext at rest, and deleting an org crypto-shreds it (SPEC §8).

These tests commit (``transactional_db``) so that what they inspect is what a backup,
a disk image or a database dump would contain.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import uuid

import pytest
from django.db import connection

from apps.core import crypto, keystore
from apps.issues.models import Activity, Attachment, Checkpoint, Comment, Issue
from apps.issues.services import (
    attachment_create,
    attachment_obsolete,
    attachment_upload_prepare,
    attachment_upload_store,
    comment_create,
    comment_retract,
    issue_update,
    org_delete,
)
from apps.leases import services as leases
from tests.conftest import new_issue


def _write_everything(w, marker: str) -> dict:
    """Every kind of sealed content, each carrying ``marker``."""
    issue = new_issue(
        w.a,
        f"title {marker}",
        body=f"body {marker}",
        acceptance=[f"criterion {marker}"],
        no_dependency=f"nodep {marker}",
    )
    claim = leases.claim_issue(actor=w.a, identifier=issue.identifier)
    token = claim["claimToken"]
    leases.checkpoint(actor=w.a, identifier=issue.identifier, note=f"checkpoint {marker}", claim_token=token)
    issue_update(actor=w.a, identifier=issue.identifier, claim_token=token, evidence=[f"evidence {marker}"])
    comment = comment_create(actor=w.a, issue=issue.identifier, body=f"comment {marker}")
    comment_retract(actor=w.a, comment=str(comment.pk), note=f"retracted {marker}")
    att = attachment_create(actor=w.a, issue=issue.identifier, url=f"https://files.example/{marker}.txt", title=f"att {marker}")
    attachment_obsolete(actor=w.a, attachment=str(att.pk), reason=f"obsolete {marker}")
    upload = attachment_upload_prepare(actor=w.a, issue=issue.identifier)
    stored = attachment_upload_store(
        token=upload["uploadUrl"].rsplit("/", 1)[1],
        content=f"file contents {marker}\n".encode() * 50,
        content_type="text/plain",
        filename=f"notes-{marker}.txt",
    )
    leases.release_issue(actor=w.a, identifier=issue.identifier, claim_token=token, note=f"release {marker}")
    other = new_issue(w.a, "to cancel", no_dependency="x")
    issue_update(actor=w.a, identifier=other.identifier, cancel_reason=f"cancel {marker}", status="canceled")
    return {"issue": issue, "comment": comment, "attachment": att, "upload": stored}


def _sanity_the_content_is_there(found: dict, marker: str) -> None:
    keystore.clear_cache()
    issue = Issue.objects.get(pk=found["issue"].pk)
    assert issue.title == f"title {marker}"
    assert Comment.objects.get(pk=found["comment"].pk).body == f"comment {marker}"
    assert Attachment.objects.get(pk=found["attachment"].pk).url == f"https://files.example/{marker}.txt"
    uploaded = Attachment.objects.get(pk=found["upload"].pk)
    assert uploaded.file.startswith(f"file contents {marker}".encode()) and uploaded.title == f"notes-{marker}.txt"
    assert {c.note for c in Checkpoint.objects.filter(issue=issue)} == {f"checkpoint {marker}", f"release {marker}"}
    texts = [str(a.changes) for a in Activity.objects.filter(issue=issue)]
    assert any(marker in t for t in texts)  # the receipts carry it too, sealed


def _needles(marker: str) -> list[bytes]:
    # Plaintext, and the hex a bytea column would show in a text dump.
    return [marker.encode(), marker.encode().hex().encode(), marker.encode().hex().upper().encode()]


def _sqlite_files() -> list[str]:
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cur:
        cur.execute("PRAGMA wal_checkpoint(FULL)")
    return [p for p in (name, f"{name}-wal", f"{name}-shm", f"{name}-journal") if os.path.exists(p)]


def _read_outside(path) -> bytes:
    """The bytes of a file the test process's SQLite connections have open, read by another
    process. Opening and closing it here would drop every POSIX lock this process holds on
    it (fcntl locks are per process, not per descriptor): a live server's connection then
    believes it is the last one, checkpoints and deletes the -wal and -shm files under ours,
    and later connections fail with "disk I/O error"."""
    return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout


def _pg_rows_as_text() -> str:
    """Every row of every table in the schema, every column cast to text."""
    chunks = []
    with connection.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")
        tables = [r[0] for r in cur.fetchall()]
        for table in tables:
            cur.execute(f'SELECT t::text FROM "{table}" t')
            chunks.extend(r[0] for r in cur.fetchall())
    assert "issues_activity" in tables and "issues_issue" in tables
    return "\n".join(chunks)


def _pg_dump() -> bytes | None:
    if not shutil.which("pg_dump"):
        return None
    s = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": s.get("PASSWORD") or ""}
    args = ["pg_dump", "--data-only", "--no-owner", "-d", s["NAME"]]
    if s.get("HOST"):
        args += ["-h", s["HOST"]]
    if s.get("PORT"):
        args += ["-p", str(s["PORT"])]
    if s.get("USER"):
        args += ["-U", s["USER"]]
    done = subprocess.run(args, env=env, capture_output=True, timeout=120)
    if done.returncode != 0:  # e.g. a client older than the server: the raw SQL scan still runs
        return None
    return done.stdout


def test_database_holds_no_plaintext(tworld):
    marker = f"PLAINMARK{uuid.uuid4().hex}"
    found = _write_everything(tworld, marker)
    _sanity_the_content_is_there(found, marker)

    if connection.vendor == "sqlite":
        files = _sqlite_files()
        assert files, "the test database is a file"
        for path in files:
            raw = _read_outside(path)
            for needle in _needles(marker):
                assert needle not in raw, f"plaintext found in {os.path.basename(path)}"
    else:
        dump = _pg_rows_as_text().encode()
        pg_dump = _pg_dump()
        for needle in _needles(marker):
            assert needle not in dump
            if pg_dump is not None:
                assert needle not in pg_dump
        # The receipt chain specifically: every row, every column.
        with connection.cursor() as cur:
            cur.execute("SELECT t::text FROM issues_activity t")
            activity = "\n".join(r[0] for r in cur.fetchall())
        assert activity.count("\n") >= 5
        for needle in _needles(marker):
            assert needle.decode() not in activity


def _ciphertexts(org) -> list[tuple]:
    """A backup of the org's content: (model, aad, ciphertext) copied into memory."""
    out = []
    for model, field in (
        (Issue, "title"),
        (Issue, "body"),
        (Comment, "body"),
        (Checkpoint, "note"),
        (Attachment, "url"),
        (Attachment, "file"),
    ):
        for row in model.objects.filter(org_id=org.pk).exclude(**{f"{field}_enc": None}):
            out.append(
                (
                    f"{model._meta.db_table}.{field}",
                    crypto.aad(str(org.pk), model._meta.db_table, field, str(row.pk)),
                    bytes(getattr(row, f"{field}_enc")),
                )
            )
    for row in Activity.objects.filter(org_id=org.pk):
        out.append(
            (
                "issues_activity.changes",
                crypto.aad(str(org.pk), "issues_activity", "changes", str(row.seq)),
                bytes(row.changes_enc),
            )
        )
    return out


def _open(org_ref: str, aad: bytes, blob: bytes) -> bytes:
    return crypto.open_sealed(keystore.data_key(org_ref), blob, aad, where="backup")


def test_deleting_an_org_shreds_its_content_even_in_backups(tworld, tmp_path):
    w = tworld
    marker = f"SHREDMARK{uuid.uuid4().hex}"
    _write_everything(w, marker)
    parent = new_issue(w.a, "container", work=False)
    new_issue(w.a, "child", parent=parent.identifier)  # org deletion must cope with the hierarchy
    survivor = new_issue(w.x, f"globex keeps {marker}")
    org_ref = str(w.org.pk)
    org_pk = w.org.pk
    issue_count = Issue.objects.filter(org_id=org_pk).count()

    # The backup: ciphertext in memory, and on SQLite a copy of the database file.
    backup = _ciphertexts(w.org)
    assert len(backup) > 10
    assert any(marker.encode() in _open(org_ref, a, b) for _, a, b in backup)
    if connection.vendor == "sqlite":
        files = _sqlite_files()
        subprocess.run(["cp", files[0], str(tmp_path / "backup.sqlite3")], check=True)  # see _read_outside
    key_file = keystore.keystore_dir() / f"{org_ref}.key"
    assert key_file.exists()

    org_delete(org=w.org)

    keystore.clear_cache()  # as after a restart: nothing remembered in memory
    assert not key_file.exists()
    for _where, aad, blob in backup:
        with pytest.raises(crypto.IntegrityError, match=f"org {org_ref} has no data key"):
            _open(org_ref, aad, blob)
    if connection.vendor == "sqlite":
        db = sqlite3.connect(tmp_path / "backup.sqlite3")
        rows = db.execute("SELECT id, title_enc FROM issues_issue WHERE org_id = ?", [org_pk.hex]).fetchall()
        db.close()
        assert len(rows) == issue_count == 4
        for row_id, title_enc in rows:
            with pytest.raises(crypto.IntegrityError, match="has no data key"):
                _open(org_ref, crypto.aad(org_ref, "issues_issue", "title", str(uuid.UUID(row_id))), title_enc)
    # The content is gone from the live database; the receipts stay, unreadable.
    assert not Issue.objects.filter(org_id=org_pk).exists()
    leftovers = list(Activity.objects.filter(org_id=org_pk))
    assert leftovers
    with pytest.raises(crypto.IntegrityError):
        leftovers[0].changes  # noqa: B018
    # Another org is untouched.
    assert Issue.objects.get(pk=survivor.pk).title == f"globex keeps {marker}"
