"""Uploaded attachment files: one-time signed URL, sealed at rest, members-only download."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from apps.issues.models import Activity, Attachment
from tests.api.conftest import client, create

CONTENT = b"%PDF-1.4 secret build log \x00\x01\x02"


def upload_path(prepared: dict) -> str:
    return urlsplit(prepared["uploadUrl"]).path


def prepare(c, ident="ACME-1") -> dict:
    r = c.post(f"/api/v1/issues/{ident}/attachments/upload")
    assert r.status_code == 200, r.content
    return r.json()


def put(path, data=CONTENT, **extra):
    return APIClient().put(path, data, content_type="application/pdf", **extra)


@pytest.fixture
def issue(world, owner):
    return create(owner)["identifier"]


def test_upload_round_trip(world, owner, member, issue):
    prepared = prepare(owner)
    assert set(prepared) >= {"uploadUrl", "expiresAt", "attachmentId"}
    assert prepared["uploadUrl"].startswith("http") and "/api/v1/uploads/" in prepared["uploadUrl"]
    r = put(upload_path(prepared) + "?filename=build.pdf")
    assert r.status_code == 201, r.content
    att = r.json()
    assert (att["id"], att["issue"], att["title"]) == (prepared["attachmentId"], "ACME-1", "build.pdf")
    assert att["url"].endswith(f"/api/v1/attachments/{att['id']}/file")

    row = Attachment.objects.get(pk=att["id"])
    assert CONTENT not in bytes(row.file_enc) and b"secret" not in bytes(row.file_enc)  # sealed at rest
    assert (row.file_size, row.content_type, row.created_by_id, row.key_id) == (
        len(CONTENT),
        "application/pdf",
        world.owner.pk,
        world.a.key_id,
    )
    receipt = Activity.objects.filter(org=world.org, verb="attached").get()
    assert receipt.changes["attachment"][1]["id"] == att["id"] and receipt.key_id == world.a.key_id

    for c in (owner, member):
        r = c.get(f"/api/v1/attachments/{att['id']}/file")
        assert r.status_code == 200
        assert r.content == CONTENT
        assert r["Content-Type"] == "application/pdf"
        assert r["Content-Disposition"] == 'attachment; filename="build.pdf"'
    session = APIClient()
    session.force_login(world.member)
    assert session.get(f"/api/v1/attachments/{att['id']}/file").content == CONTENT
    assert owner.get("/api/v1/issues/ACME-1/attachments").json()["attachments"] == [att]


def test_download_is_for_members_of_the_org_only(world, owner, outsider, issue):
    att_id = put(upload_path(prepare(owner))).json()["id"]
    r = outsider.get(f"/api/v1/attachments/{att_id}/file")
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
    r = APIClient().get(f"/api/v1/attachments/{att_id}/file")
    assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")
    r = owner.get("/api/v1/attachments/not-a-uuid/file")
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")


def test_a_url_attachment_has_no_file_to_download(world, owner, issue):
    att = owner.post("/api/v1/issues/ACME-1/attachments", {"url": "https://example.com/x"}, format="json").json()
    r = owner.get(f"/api/v1/attachments/{att['id']}/file")
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")


def test_an_upload_url_works_once(world, owner, issue, unchanged):
    path = upload_path(prepare(owner))
    assert put(path).status_code == 201
    with unchanged():
        r = put(path, b"second")
    assert (r.status_code, r.json()["code"]) == (409, "CONFLICT")


def test_a_tampered_or_foreign_token_is_refused(world, owner, issue, unchanged):
    path = upload_path(prepare(owner))
    with unchanged():
        for bad in (path[:-3] + "abc", "/api/v1/uploads/garbage", "/api/v1/uploads/" + "x" * 50):
            r = put(bad)
            assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED"), bad


def test_an_expired_upload_url_is_refused(world, owner, issue, unchanged, monkeypatch, settings):
    path = upload_path(prepare(owner))
    later = time.time() + settings.RETASC_UPLOAD_URL_TTL_SECONDS + 5
    monkeypatch.setattr("django.core.signing.time.time", lambda: later)
    with unchanged():
        r = put(path)
    assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")


def test_an_upload_from_a_revoked_key_is_refused(world, owner, issue, unchanged):
    from apps.leases.revocation import agent_key_revoke

    path = upload_path(prepare(owner))
    agent_key_revoke(key=world.a.key)
    with unchanged():
        r = put(path)
    assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")


@override_settings(RETASC_UPLOAD_MAX_BYTES=10)
def test_size_limit(world, owner, issue, unchanged):
    path = upload_path(prepare(owner))
    with unchanged():
        r = put(path, b"x" * 11)
        assert (r.status_code, r.json()["code"], r.json()["maxBytes"]) == (413, "TOO_LARGE", 10)
        r = put(path, b"")
        assert (r.status_code, r.json()["code"]) == (400, "INVALID_ARGUMENT")
    assert put(path, b"x" * 10).status_code == 201


def test_prepare_refusals(world, owner, outsider, issue, unchanged):
    with unchanged():
        r = outsider.post("/api/v1/issues/ACME-1/attachments/upload")
        assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
        r = APIClient().post("/api/v1/issues/ACME-1/attachments/upload")
        assert r.status_code == 401


def test_a_session_user_can_upload(world, issue):
    c = APIClient()
    c.force_login(world.member)
    r = put(upload_path(prepare(c)))
    assert r.status_code == 201
    row = Attachment.objects.get(pk=r.json()["id"])
    assert (row.created_by_id, row.key_id) == (world.member.pk, None)
    assert client(world.owner_agent.raw).get(f"/api/v1/attachments/{row.pk}/file").content == CONTENT
