"""Who may call /api/v1/: agent keys, signed-in sessions (CSRF on writes), nobody else."""

from __future__ import annotations

import pytest
from django.middleware.csrf import _get_new_csrf_string
from rest_framework.test import APIClient

from apps.api.views import ROUTES
from apps.leases.revocation import agent_key_revoke
from apps.orgs.models import Org
from apps.orgs.services import member_add, user_get_or_create
from tests.api.conftest import client, create

UNAUTHORIZED = {"code": "UNAUTHORIZED", "message": "Missing, unknown or revoked agent key."}
SAMPLE = {
    "identifier": "ACME-1",
    "comment": "00000000-0000-0000-0000-000000000000",
    "attachment": "x",
    "type": "blocks",
    "target": "ACME-2",
    "prefix": "ACME",
    "member": "1",
    "connector": "1",
}


def every_endpoint():
    for route, (_, methods) in ROUTES.items():
        url = "/api/v1/" + route
        for name, sample in SAMPLE.items():
            url = url.replace(f"<str:{name}>", sample)
        for method in methods:
            yield method, url
    yield "get", "/api/v1/attachments/x/file"


@pytest.mark.parametrize(("method", "url"), list(every_endpoint()))
def test_anonymous_is_refused_everywhere(world, unchanged, method, url):
    with unchanged():
        r = getattr(APIClient(), method)(url, {}, format="json")
    assert r.status_code == 401
    assert r.json() == UNAUTHORIZED
    assert r["WWW-Authenticate"] == 'Bearer realm="retasc"'


@pytest.mark.parametrize(
    "header",
    ["Bearer rtsc_nope_nope", "Bearer ", "Basic dXNlcjpwdw==", "Bearer " + "rtsc_" + "x" * 300, "rtsc_abc", "Token abc"],
)
def test_every_bad_credential_gets_the_same_answer(world, header):
    r = APIClient().get("/api/v1/whoami", HTTP_AUTHORIZATION=header)
    assert (r.status_code, r.json()) == (401, UNAUTHORIZED)


def test_revoked_key_is_refused_like_an_unknown_one(world):
    agent_key_revoke(key=world.owner_agent.actor.key)
    r = client(world.owner_agent.raw).get("/api/v1/whoami")
    assert (r.status_code, r.json()) == (401, UNAUTHORIZED)


def test_a_suspended_members_key_stops_working(world, owner):
    r = owner.post(f"/api/v1/members/{world.member.email}/suspend")
    assert r.status_code == 200 and r.json()["status"] == "suspended"
    r = client(world.member_agent.raw).get("/api/v1/whoami")
    assert (r.status_code, r.json()) == (401, UNAUTHORIZED)


def test_agent_key_identifies_principal_runtime_and_org(world, member):
    r = member.get("/api/v1/whoami")
    assert r.status_code == 200
    body = r.json()
    assert body["principal"]["email"] == world.member.email
    assert body["runtime"] == "codex"
    assert body["org"]["slug"] == world.org.slug
    assert body["project"]["prefix"] == "ACME"


def test_outsider_reads_another_orgs_issue_as_not_found(world, owner, outsider, unchanged):
    ident = create(owner)["identifier"]
    with unchanged():
        for method, url, body in [
            ("get", f"/api/v1/issues/{ident}", None),
            ("patch", f"/api/v1/issues/{ident}", {"title": "mine now"}),
            ("get", f"/api/v1/issues/{ident}/activity", None),
            ("post", f"/api/v1/issues/{ident}/claim", {}),
            ("post", f"/api/v1/issues/{ident}/comments", {"body": "hi"}),
            ("get", f"/api/v1/issues/{ident}/comments", None),
            ("post", f"/api/v1/issues/{ident}/attachments/upload", None),
        ]:
            r = getattr(outsider, method)(url, body, format="json")
            assert r.status_code == 404, (method, url, r.content)
            assert r.json()["code"] == "NOT_FOUND"


# --- sessions -------------------------------------------------------------------------


def test_session_user_acts_in_their_first_org(world):
    c = APIClient()
    c.force_login(world.member)
    r = c.get("/api/v1/whoami")
    assert r.status_code == 200
    assert r.json()["runtime"] == "dash"
    assert r.json()["key"] is None
    assert r.json()["org"]["slug"] == world.org.slug


def test_session_org_header_picks_the_org(world):
    member_add(org=world.other_org, user=world.member)
    c = APIClient()
    c.force_login(world.member)
    r = c.get("/api/v1/whoami", HTTP_X_RETASC_ORG=world.other_org.slug)
    assert r.status_code == 200 and r.json()["org"]["slug"] == world.other_org.slug


def test_session_org_header_for_an_org_you_are_not_in_is_not_found(world):
    c = APIClient()
    c.force_login(world.member)
    for slug in (world.other_org.slug, "no-such-org"):
        r = c.get("/api/v1/whoami", HTTP_X_RETASC_ORG=slug)
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


def test_session_user_without_an_org_is_unauthorized(world):
    loner, _ = user_get_or_create(email="loner@nowhere.test", password="pw-loner-1")
    c = APIClient()
    c.force_login(loner)
    r = c.get("/api/v1/whoami")
    assert (r.status_code, r.json()) == (401, UNAUTHORIZED)


def test_session_writes_need_csrf(world, unchanged):
    c = APIClient(enforce_csrf_checks=True)
    c.force_login(world.owner)
    body = {"title": "From the browser", "work": True, "noDependency": "none"}
    with unchanged():
        r = c.post("/api/v1/issues", body, format="json")
    assert r.status_code == 403
    assert r.json()["code"] == "FORBIDDEN" and r.json()["reason"] == "csrf"
    token = _get_new_csrf_string()
    c.cookies["csrftoken"] = token
    r = c.post("/api/v1/issues", body, format="json", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 201
    assert r.json()["author"] == world.owner.email
    assert r.json()["title"] == "From the browser"


def test_session_reads_need_no_csrf(world):
    c = APIClient(enforce_csrf_checks=True)
    c.force_login(world.owner)
    assert c.get("/api/v1/issues").status_code == 200


def test_bearer_key_writes_need_no_csrf(world):
    c = client(world.owner_agent.raw, enforce_csrf_checks=True)
    create(c)


def test_a_bad_bearer_header_is_refused_even_with_a_session(world):
    c = APIClient()
    c.force_login(world.owner)
    r = c.get("/api/v1/whoami", HTTP_AUTHORIZATION="Bearer rtsc_wrong")
    assert (r.status_code, r.json()) == (401, UNAUTHORIZED)


def test_deleted_org_keys_are_refused(world):
    from django.utils import timezone

    Org.objects.filter(pk=world.org.pk).update(deleted_at=timezone.now())
    r = client(world.owner_agent.raw).get("/api/v1/whoami")
    assert (r.status_code, r.json()) == (401, UNAUTHORIZED)
