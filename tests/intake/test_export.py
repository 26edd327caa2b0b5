"""The org export: owner-only, decrypted, never another tenant's data or a secret."""

from __future__ import annotations

import csv
import io
import json

import pytest

from apps.core.errors import ServiceError
from apps.intake.services import CSV_COLUMNS, org_export
from tests.conftest import new_issue


def _populate(w):
    from apps.issues.services import comment_create
    from apps.tools import operations

    first = new_issue(w.a, "Secret roadmap", body="Launch **in May**.", acceptance=["Ships"], priority=1)
    second = new_issue(w.a, "=cmd|' /C calc'!A0", blocked_by=[first.identifier])
    comment_create(actor=w.a, issue=first.identifier, body="Looks good to me")
    claim = operations.next_issue(w.a)
    assert claim["issue"]["identifier"] == first.identifier
    operations.checkpoint(w.a, identifier=first.identifier, note="Halfway there", claimToken=claim["claimToken"])
    outsider = new_issue(w.x, "Globex private plan", body="not yours")
    return first, second, outsider


def _body(export) -> str:
    return "".join(export.chunks)


def test_json_export_is_everything_decrypted_and_nothing_else(world):
    first, second, outsider = _populate(world)
    export = org_export(actor=world.a, format="json")
    assert export.content_type == "application/json" and export.filename.endswith(".json")
    text = _body(export)
    data = json.loads(text)
    assert data["org"]["slug"] == world.org.slug and data["format"] == "retasc-export"
    assert [p["prefix"] for p in data["projects"]] == ["ACME"]
    assert {m["email"] for m in data["members"]} == {world.owner.email, world.member.email}
    by_id = {i["identifier"]: i for i in data["issues"]}
    assert set(by_id) == {first.identifier, second.identifier}
    assert by_id[first.identifier]["title"] == "Secret roadmap" and by_id[first.identifier]["body"] == "Launch **in May**."
    assert by_id[first.identifier]["acceptance"] == ["Ships"]
    assert by_id[second.identifier]["blockedBy"] == [first.identifier]
    assert by_id[first.identifier]["relations"] == [
        {"type": "blocks", "target": second.identifier, "createdAt": by_id[first.identifier]["relations"][0]["createdAt"]}
    ]
    assert [a["seq"] for a in data["activity"]] == sorted(a["seq"] for a in data["activity"]) and data["activity"]
    assert any(a["verb"] for a in data["activity"] if a["issue"] == first.identifier)
    # Another tenant's content and every secret stay out.
    assert by_id[first.identifier]["comments"][0]["body"] == "Looks good to me"
    assert [c["note"] for c in by_id[first.identifier]["checkpoints"]] == ["Halfway there"]
    assert by_id[first.identifier]["checkpoint"] == "Halfway there" and "claim" not in by_id[first.identifier]
    assert "Globex" not in text and "GLX-" not in text
    assert "Globex private plan" not in text and world.outsider.email not in text
    for raw in (world.owner_agent.raw, world.member_agent.raw):
        assert raw not in text
    assert "secret_hash" not in text and "code_hash" not in text


def test_csv_export_parses_and_defuses_formulas(world):
    first, second, _ = _populate(world)
    rows = list(csv.DictReader(io.StringIO(_body(org_export(actor=world.a, format="csv")))))
    assert tuple(rows[0]) == CSV_COLUMNS
    by_id = {r["identifier"]: r for r in rows}
    assert set(by_id) == {first.identifier, second.identifier}
    assert by_id[first.identifier]["title"] == "Secret roadmap"
    assert by_id[second.identifier]["title"] == "'=cmd|' /C calc'!A0"
    assert by_id[second.identifier]["blockedBy"] == first.identifier


def test_export_is_owner_only(world):
    with pytest.raises(ServiceError) as refused:
        org_export(actor=world.b, format="json")
    assert refused.value.code == "FORBIDDEN"
    with pytest.raises(ServiceError) as bad:
        org_export(actor=world.a, format="xml")
    assert bad.value.code == "INVALID_ARGUMENT"


def test_export_endpoint_streams_for_a_personal_token(world):
    from django.test import Client

    from apps.devices.services import personal_token_mint

    _populate(world)
    _, owner_token = personal_token_mint(user=world.owner)
    _, member_token = personal_token_mint(user=world.member)
    client = Client()
    r = client.get("/api/v1/export", {"format": "csv"}, HTTP_AUTHORIZATION=f"Bearer {owner_token}")
    assert r.status_code == 200 and r.streaming and r["Content-Type"].startswith("text/csv")
    body = b"".join(r.streaming_content).decode()
    assert "Secret roadmap" in body and "Globex" not in body
    denied = client.get("/api/v1/export", HTTP_AUTHORIZATION=f"Bearer {member_token}")
    assert denied.status_code == 403 and denied.json()["code"] == "FORBIDDEN"
    agent = client.get("/api/v1/export", HTTP_AUTHORIZATION=f"Bearer {world.member_agent.raw}")
    assert agent.status_code == 403
    assert client.get("/api/v1/export").status_code == 401
