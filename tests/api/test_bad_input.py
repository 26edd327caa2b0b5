"""Bad input that used to answer 500 answers 400 ``{code, message}``, changes nothing, and
the API words over-long values as MCP does, without echoing them (hardening items 12-13).
Run on SQLite and PostgreSQL: some of these failed only on one of them."""

from __future__ import annotations

import base64
import json

import pytest
from django.test import Client

from apps.core.errors import ServiceError
from apps.issues.models import Attachment, Label
from apps.tools import operations as ops
from tests.api.conftest import create
from tests.api.test_uploads import prepare, put, upload_path


def _bad(r, code="INVALID_ARGUMENT"):
    assert r.status_code == 400, (r.status_code, r.content[:300])
    body = r.json()
    assert body["code"] == code and isinstance(body["message"], str) and body["message"]
    assert len(r.content) < 1000
    return body


@pytest.mark.parametrize(
    "raw",
    [
        b"a|b|c",
        b"2026-01-01T00:00:00+00:00|1|not-a-uuid",
        b"2026-01-01T00:00:00|1|00000000-0000-0000-0000-000000000000",  # naive datetime
        b"2026-01-01T00:00:00+00:00|99999999999999999999999|00000000-0000-0000-0000-000000000000",
        b"9999-99-99|1|00000000-0000-0000-0000-000000000000",
        b"\xff\xfe|1|2",
        b"only|two",
    ],
)
def test_a_cursor_whose_parts_are_wrong(world, owner, raw):
    create(owner)
    cursor = base64.urlsafe_b64encode(raw).decode()
    body = _bad(owner.get("/api/v1/issues", {"cursor": cursor}))
    assert body["message"] == "That cursor is not one this server gave out."


def test_a_cursor_the_server_gave_out_still_pages(world, owner):
    for n in range(3):
        create(owner, f"T{n}")
    first = owner.get("/api/v1/issues", {"limit": 2}).json()
    second = owner.get("/api/v1/issues", {"limit": 2, "cursor": first["nextCursor"]}).json()
    assert [i["title"] for i in first["issues"] + second["issues"]] == ["T2", "T1", "T0"]


def test_priority_past_64_bits(world, owner):
    create(owner)
    _bad(owner.get("/api/v1/issues", {"priority": "99999999999999999999999"}))
    _bad(owner.get("/api/v1/issues", {"priority": "-99999999999999999999999"}))


def test_a_lone_surrogate_in_a_title(world, owner, unchanged):
    raw = b'{"title": "bad \\ud800 title", "work": true, "noDependency": "none"}'
    with unchanged():
        body = _bad(owner.post("/api/v1/issues", raw, content_type="application/json"))
    assert body["message"] == "title is not valid Unicode text (it has a lone surrogate)."


def test_deeply_nested_json(world, owner, unchanged):
    with unchanged():
        _bad(owner.post("/api/v1/issues", b"[" * 100_000, content_type="application/json"))
        _bad(owner.post("/api/v1/issues", b'{"title": ' + b"[" * 100_000, content_type="application/json"))


def test_nul_bytes(world, owner, unchanged):
    create(owner)
    with unchanged():
        body = _bad(owner.post("/api/v1/labels", {"name": "bad\x00label"}, format="json"))
        assert body["message"] == "name must not contain NUL characters."
        _bad(owner.get("/api/v1/issues", {"label": "x\x00y"}))
        _bad(owner.get("/api/v1/issues", {"author": "x\x00y@example.com"}))
        _bad(owner.get("/api/v1/members", {"query": "x\x00"}))
        _bad(owner.get("/api/v1/projects/P%00"))
    assert not Label.objects.filter(org_id=world.org.pk).exists()


def test_a_carriage_return_in_an_upload_filename(world, owner, unchanged):
    ident = create(owner)["identifier"]
    path = upload_path(prepare(owner, ident))
    with unchanged():
        body = _bad(put(f"{path}?filename=report%0d.pdf"))
    assert body["message"] == "filename must be one line."
    assert not Attachment.objects.filter(org_id=world.org.pk).exists()
    r = put(f"{path}?filename=report.pdf")  # the link is still good
    assert r.status_code == 201 and r.json()["title"] == "report.pdf"


def test_dash_queue_offset_past_64_bits(world):
    c = Client()
    c.force_login(world.owner)
    r = c.get("/queue/", {"offset": "99999999999999999999999"})
    assert r.status_code == 400
    page = r.content.decode()
    assert "INVALID_ARGUMENT" in page and "offset must be a whole number from 0 to 1000000." in page
    assert c.get("/queue/", {"offset": "0"}).status_code == 200


# --- item 13: the same words on both interfaces, never the value ------------------------


@pytest.mark.parametrize(
    ("field", "size", "message"),
    [
        ("body", 200_001, "body is longer than 200000 characters."),
        ("body", 900_000, "body is longer than 200000 characters."),
        ("title", 301, "title is longer than 300 characters."),
        ("noDependency", 5000, "noDependency is longer than 300 characters."),
    ],
)
def test_over_long_values_are_refused_in_mcps_words(world, owner, unchanged, settings, field, size, message):
    settings.RETASC_MAX_BODY_BYTES = 4 * 1024 * 1024
    args = {"title": "Long", "work": True, "noDependency": "none", field: "x" * size}
    with unchanged():
        r = owner.post("/api/v1/issues", args, format="json")
        with pytest.raises(ServiceError) as mcp:  # what the MCP tool runs
            ops.save_issue(world.a, **args)
    assert r.status_code == 400
    assert r.json() == {"code": "INVALID_ARGUMENT", "message": message, "field": field}
    assert mcp.value.message == message
    assert len(r.content) < 200


def test_over_long_list_entries_are_not_echoed(world, owner, unchanged):
    with unchanged():
        r = owner.post(
            "/api/v1/issues",
            {"title": "L", "work": True, "noDependency": "n", "labels": ["y" * 50_000]},
            format="json",
        )
    assert r.status_code == 400 and len(r.content) < 300
    assert json.loads(r.content)["message"] == "an entry of labels is longer than 60 characters."


def test_a_file_stored_earlier_with_a_carriage_return_in_its_name_downloads(world, owner):
    ident = create(owner)["identifier"]
    att_id = put(f"{upload_path(prepare(owner, ident))}?filename=ok.pdf").json()["id"]
    att = Attachment.objects.get(pk=att_id)
    att.title = 'bad\r\nname".pdf'  # what an older release stored
    att.save(update_fields=["title_enc"])
    r = owner.get(f"/api/v1/attachments/{att_id}/file")
    assert r.status_code == 200
    assert r["Content-Disposition"] == 'attachment; filename="badname.pdf"'
