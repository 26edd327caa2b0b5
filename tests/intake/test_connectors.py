"""Connector provisioning, listing, revoking and the delivery log: services, the API,
the operator command; sealing at rest; who may do what."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.test import APIClient

from apps.core.errors import ServiceError
from apps.intake.models import Connector
from apps.issues.models import Activity
from apps.leases.revocation import member_reactivate
from apps.orgs.services import actor_for_human, agent_key_mint, placeholder_get_or_create
from tests.api.conftest import client
from tests.conftest import new_issue, snapshot
from tests.intake import hooks
from tests.intake.hooks import payload


@pytest.fixture
def owner_session(world) -> APIClient:
    c = APIClient()
    c.force_authenticate(user=world.owner, token=actor_for_human(user=world.owner, org=world.org))
    return c


def test_create_answers_the_same_shape_everywhere_and_seals_secrets(world, owner_session, tmp_path, settings):
    r = owner_session.post(
        "/api/v1/connectors",
        {"provider": "github", "project": "acme", "repo": "octocat/Hello-World", "token": "ghp_sekret", "prSync": True},
        format="json",
    )
    assert r.status_code == 201, r.content
    created = r.json()
    assert set(created) == {"connectorId", "webhookUrl", "secret"}
    assert created["webhookUrl"] == f"{settings.PUBLIC_URL}/hooks/github/{created['connectorId']}"
    row = Connector.objects.get(pk=created["connectorId"])
    assert (row.secret, row.token, row.pr_sync, row.api_url) == (created["secret"], "ghp_sekret", True, "https://api.github.com")
    with connection.cursor() as cur:  # nothing readable in the database
        cur.execute("SELECT secret_enc, token_enc FROM intake_connector")
        secret_enc, token_enc = cur.fetchone()
    assert created["secret"].encode() not in bytes(secret_enc) and b"ghp_sekret" not in bytes(token_enc)
    assert Activity.objects.filter(verb="connector_added").count() == 1

    token_file = tmp_path / "token"
    token_file.write_text("glpat-x\n")
    out = io.StringIO()
    call_command(
        "add_connector", "--org", world.org.slug, "--project", "ACME", "--provider", "gitlab", "--repo", "group/sub/proj",
        "--token-file", str(token_file), "--api-url", "http://127.0.0.1:9/api/v4", "--json", stdout=out,
    )  # fmt: skip
    made = json.loads(out.getvalue())
    assert set(made) == {"connectorId", "webhookUrl", "secret"}
    row = Connector.objects.get(pk=made["connectorId"])
    assert (row.provider, row.repo, row.token, row.api_url) == (
        "gitlab",
        "group/sub/proj",
        "glpat-x",
        "http://127.0.0.1:9/api/v4",
    )
    with pytest.raises(CommandError, match="no org"):
        call_command("add_connector", "--org", "nope", "--project", "ACME", "--provider", "github", "--repo", "a/b")


@pytest.mark.parametrize(
    "body, field",
    [
        ({"provider": "bitbucket", "project": "ACME", "repo": "a/b"}, "provider"),
        ({"provider": "github", "project": "ACME", "repo": "not a repo"}, "repo"),
        ({"provider": "github", "project": "ACME", "repo": "a/b", "apiUrl": "ftp://x"}, "apiUrl"),
        ({"provider": "github", "project": "ACME", "repo": "a/b", "apiUrl": "https://u:p@x"}, "apiUrl"),
        ({"provider": "github", "project": "NOPE", "repo": "a/b"}, None),
    ],
)
def test_bad_input_is_refused_and_nothing_written(world, owner_session, body, field):
    before = (snapshot(), Connector.objects.count())
    r = owner_session.post("/api/v1/connectors", body, format="json")
    assert r.status_code in (400, 404) and r.json().get("field") == field
    assert (snapshot(), Connector.objects.count()) == before


def test_only_owners_create_and_revoke(world, owner_session):
    member = APIClient()
    member.force_authenticate(user=world.member, token=actor_for_human(user=world.member, org=world.org))
    before = Connector.objects.count()
    r = member.post("/api/v1/connectors", {"provider": "github", "project": "ACME", "repo": "a/b"}, format="json")
    assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN") and Connector.objects.count() == before
    created = hooks.connect(world)
    r = member.post(f"/api/v1/connectors/{created['connectorId']}/revoke")
    assert r.status_code == 403 and Connector.objects.get(pk=created["connectorId"]).revoked_at is None
    assert member.get("/api/v1/connectors").json()["connectors"][0]["repo"] == "octocat/Hello-World"  # members read


def test_list_revoke_and_the_delivery_log_over_the_api(world):
    owner = client(world.owner_agent.raw)  # an owner's agent key may list and revoke (SPEC §5 tools)
    c = hooks.connect(world)
    hooks.github(c, "ping", payload("github", "ping"), delivery="p-1")
    hooks.github(c, "issues", payload("github", "issues-opened"), delivery="o-1")
    listed = owner.get("/api/v1/connectors").json()["connectors"]
    assert [(x["connectorId"], x["provider"], x["repo"], x["project"], x["live"]) for x in listed] == [
        (c["connectorId"], "github", "octocat/Hello-World", "ACME", True)
    ]
    assert listed[0]["counts"] == {"deliveries": 2, "issues": 1, "writebacks": 0} and listed[0]["lastDeliveryAt"]
    assert c["secret"] not in json.dumps(listed)
    log = owner.get(f"/api/v1/connectors/{c['connectorId']}").json()
    assert [(d["deliveryId"], d["event"], d["outcome"], d["issue"]) for d in log["deliveries"]] == [
        ("o-1", "issues", "applied", "ACME-1"),
        ("p-1", "ping", "applied", None),
    ]
    r = owner.post(f"/api/v1/connectors/{c['connectorId']}/revoke")
    assert r.status_code == 200 and r.json()["revokedAt"] and r.json()["live"] is False
    assert hooks.github(c, "ping", payload("github", "ping")).status_code == 410


def test_other_orgs_connectors_are_not_found(world):
    c = hooks.connect(world)
    outsider = client(world.outsider_agent.raw)
    assert outsider.get("/api/v1/connectors").json() == {"connectors": []}
    assert outsider.get(f"/api/v1/connectors/{c['connectorId']}").status_code == 404
    r = outsider.post(f"/api/v1/connectors/{c['connectorId']}/revoke")
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
    assert Connector.objects.get(pk=c["connectorId"]).revoked_at is None
    assert client(world.owner_agent.raw).post(f"/api/v1/connectors/{uuid.uuid4()}/revoke").status_code == 404


def test_triage_over_the_api_people_only(world, owner_session):
    issue = new_issue(world.a, "From outside", awaiting_triage=True)
    agent = client(world.owner_agent.raw)
    before = snapshot()
    r = agent.post(f"/api/v1/issues/{issue.identifier}/triage", {"accept": True}, format="json")
    assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN") and snapshot() == before
    r = owner_session.post(f"/api/v1/issues/{issue.identifier}/triage", {"accept": False}, format="json")
    assert r.status_code == 400 and r.json()["field"] == "reason" and snapshot() == before
    r = owner_session.post(f"/api/v1/issues/{issue.identifier}/triage", {"accept": True}, format="json")
    assert r.status_code == 200 and r.json()["awaitingTriage"] is False
    assert issue.activity.filter(verb="triage_accepted").count() == 1
    r = owner_session.post(f"/api/v1/issues/{issue.identifier}/triage", {"accept": True}, format="json")
    assert (r.status_code, r.json()["code"]) == (409, "CONFLICT")

    other = new_issue(world.a, "Spam", awaiting_triage=True)
    r = owner_session.post(f"/api/v1/issues/{other.identifier}/triage", {"accept": False, "reason": "spam"}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "canceled" and r.json()["awaitingTriage"] is False
    assert other.activity.get(verb="triage_rejected").changes["cancelReason"] == [None, "spam"]


def test_placeholders_never_sign_in_hold_keys_or_take_a_lane(world):
    m = placeholder_get_or_create(org=world.org, provider="github", login="octocat")
    assert placeholder_get_or_create(org=world.org, provider="github", login="octocat").pk == m.pk  # reused
    assert placeholder_get_or_create(org=world.other_org, provider="github", login="octocat").pk != m.pk  # per org
    assert (m.status, m.user.is_active, m.user.has_usable_password()) == ("placeholder", False, False)
    assert APIClient().login(username=m.user.username, password="") is False
    with pytest.raises(ServiceError) as refused:
        agent_key_mint(org=world.org, user=m.user, project=world.project, runtime="ci")
    assert refused.value.code == "FORBIDDEN"
    owner = actor_for_human(user=world.owner, org=world.org)
    with pytest.raises(ServiceError) as refused:
        member_reactivate(actor=owner, member_id=str(m.pk))
    assert refused.value.code == "CONFLICT"
    with pytest.raises(ServiceError) as refused:
        new_issue(world.a, "Lane?", assignee=m.user.email)
    assert (refused.value.code, refused.value.details["field"]) == ("INVALID_ARGUMENT", "assignee")
    with pytest.raises(ServiceError):
        placeholder_get_or_create(org=world.org, provider="github", login="bad login")
