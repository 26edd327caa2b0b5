"""Permission matrix: every Dash management endpoint against owner, member, outsider
(owner of another org) and anonymous, with exact status codes; a refused request
changes nothing. Plus CSRF enforcement.

Given the ``dash`` personas, when each one calls an endpoint, then the status is the
one in the table and, when refused, the org's rows are exactly as before.
"""

from __future__ import annotations

import pytest

from apps.orgs.models import AgentKey, Invite, Membership, Project
from apps.orgs.services import invite_create

LOGIN = "/accounts/login/"


def state():
    """Everything a management refusal must leave unchanged."""
    from tests.conftest import snapshot

    return (
        snapshot(),
        sorted(Membership.objects.values_list("pk", "status", "role")),
        sorted(AgentKey.objects.values_list("pk", "revoked_at")),
        sorted(Invite.objects.values_list("pk", "revoked_at", "accepted_at")),
        sorted(Project.objects.values_list("pk", "prefix", "name")),
    )


def targets(d):
    """Objects of org A the endpoints act on."""
    w = d.w
    member_membership = Membership.objects.get(org=w.org, user=w.member)
    owner_membership = Membership.objects.get(org=w.org, user=w.owner)
    invite, _ = invite_create(actor=w.a, expires_days=7)
    return {
        "member_id": member_membership.pk,
        "owner_member_id": owner_membership.pk,
        "owner_key": w.owner_agent.actor.key.pk,
        "member_key": w.member_agent.actor.key.pk,
        "invite": invite.pk,
        "issue": d.issue_a.identifier,
        "org": str(w.org.pk),
    }


# (name, method, url, data, {persona: expected status})
# 302 for a success that redirects; 201 for a success that shows a secret once.
MATRIX = [
    ("projects page", "get", "/org/projects/", {}, {"owner": 200, "member": 200, "outsider": 200}),
    ("project create", "post", "/org/projects/new/", {"prefix": "NEWP"}, {"owner": 302, "member": 403, "outsider": 302}),
    (
        "project rename",
        "post",
        "/org/projects/ACME/rename/",
        {"new_prefix": "ACMX"},
        {"owner": 302, "member": 403, "outsider": 404},
    ),
    ("members page", "get", "/org/members/", {}, {"owner": 200, "member": 200, "outsider": 200}),
    ("member suspend", "post", "/org/members/{member_id}/suspend/", {}, {"owner": 302, "member": 403, "outsider": 400}),
    ("member retire", "post", "/org/members/{member_id}/retire/", {}, {"owner": 302, "member": 403, "outsider": 400}),
    ("member reactivate", "post", "/org/members/{member_id}/reactivate/", {}, {"owner": 302, "member": 403, "outsider": 400}),
    (
        "owner suspend by member",
        "post",
        "/org/members/{owner_member_id}/suspend/",
        {},
        {"owner": 403, "member": 403, "outsider": 400},
    ),
    ("invites page", "get", "/org/invites/", {}, {"owner": 200, "member": 403, "outsider": 200}),
    ("invite create", "post", "/org/invites/new/", {"expires_days": "7"}, {"owner": 201, "member": 403, "outsider": 201}),
    ("invite revoke", "post", "/org/invites/{invite}/revoke/", {}, {"owner": 302, "member": 403, "outsider": 404}),
    ("keys page", "get", "/org/keys/", {}, {"owner": 200, "member": 200, "outsider": 200}),
    (
        "key mint for self",
        "post",
        "/org/keys/new/",
        {"runtime": "codex", "project": "ACME"},
        {"owner": 201, "member": 201, "outsider": 404},
    ),
    (
        "key mint for another",
        "post",
        "/org/keys/new/",
        {"runtime": "codex", "project": "ACME", "member": "{owner_member_id}"},
        {"owner": 201, "member": 403, "outsider": 400},
    ),
    ("key rotate (owner's key)", "post", "/org/keys/{owner_key}/rotate/", {}, {"owner": 201, "member": 404, "outsider": 404}),
    ("key revoke (owner's key)", "post", "/org/keys/{owner_key}/revoke/", {}, {"owner": 302, "member": 404, "outsider": 404}),
    ("key revoke (member's key)", "post", "/org/keys/{member_key}/revoke/", {}, {"owner": 302, "member": 302, "outsider": 404}),
    ("org switch", "post", "/org/switch/", {"org": "{org}"}, {"owner": 302, "member": 302, "outsider": 404}),
    ("issue page", "get", "/issues/{issue}/", {}, {"owner": 200, "member": 200, "outsider": 404}),
    ("issue comment", "post", "/issues/{issue}/comments/", {"body": "hi"}, {"owner": 302, "member": 302, "outsider": 404}),
    ("issue cancel", "post", "/issues/{issue}/cancel/", {"cancel_reason": "dup"}, {"owner": 302, "member": 302, "outsider": 404}),
    ("issue assign", "post", "/issues/{issue}/assign/", {"assignee": "none"}, {"owner": 302, "member": 302, "outsider": 404}),
    ("issue edit", "post", "/issues/{issue}/edit/", {"title": "Renamed"}, {"owner": 302, "member": 302, "outsider": 404}),
    (
        "relation add",
        "post",
        "/issues/{issue}/relations/",
        {"type": "related", "target": "{issue}"},
        {"owner": 409, "member": 409, "outsider": 404},
    ),
]
PERSONAS = ("owner", "member", "outsider", "anon")


def _fill(value, t):
    return value.format(**t) if isinstance(value, str) else value


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(("name", "method", "url", "data", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
def test_permission_matrix(dash, persona, name, method, url, data, expected):
    t = targets(dash)
    client = getattr(dash, persona)
    url = _fill(url, t)
    data = {k: _fill(v, t) for k, v in data.items()}
    before = state()
    response = getattr(client, method)(url, data)
    if persona == "anon":
        assert response.status_code == 302
        assert response["Location"].startswith(LOGIN)
        assert state() == before
        return
    want = expected[persona]
    assert response.status_code == want, (name, persona, response.content[:400])
    if want >= 400:
        assert state() == before, f"{name} refused for {persona} but changed rows"


def test_outsider_creations_land_in_their_own_org_only(dash):
    """The outsider's project/invite creations act on their org: org A is untouched."""
    w = dash.w
    dash.outsider.post("/org/projects/new/", {"prefix": "NEWP"})
    dash.outsider.post("/org/invites/new/", {"expires_days": "3"})
    assert not Project.objects.filter(org=w.org, prefix="NEWP").exists()
    assert Project.objects.filter(org=w.other_org, prefix="NEWP").exists()
    assert not Invite.objects.filter(org=w.org).exists()


def test_member_sees_only_their_own_keys(dash):
    page = dash.member.get("/org/keys/").content.decode()
    assert dash.w.member_agent.actor.key.prefix in page
    assert dash.w.owner_agent.actor.key.prefix not in page
    owner_page = dash.owner.get("/org/keys/").content.decode()
    assert dash.w.member_agent.actor.key.prefix in owner_page


def test_minted_key_is_shown_once_with_agent_configs(dash):
    response = dash.member.post("/org/keys/new/", {"runtime": "cursor", "project": "ACME", "label": "laptop"})
    body = response.content.decode()
    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    key = AgentKey.objects.filter(org=dash.w.org, user=dash.w.member, runtime="cursor").get()
    assert key.prefix in body and "rtsc_" in body
    for marker in ('"type": "http"', "bearer_token_env_var = &quot;RETASC_KEY&quot;", '"httpUrl"', "${env:RETASC_KEY}"):
        assert marker.replace('"', "&quot;") in body or marker in body, marker
    assert "http://testserver/mcp" in body
    again = dash.member.get("/org/keys/").content.decode()
    assert "rtsc_" in again and key.prefix in again
    assert body.count(key.prefix + "_") >= 1 and again.count(key.prefix + "_") == 0  # the secret is not shown again


def test_invite_code_shown_once_and_listed_with_status(dash):
    response = dash.owner.post("/org/invites/new/", {"expires_days": "3", "role": "member"})
    body = response.content.decode()
    assert response.status_code == 201
    assert "rtscinv_" in body and "/invite/rtscinv_" in body
    listing = dash.owner.get("/org/invites/").content.decode()
    assert "pending" in listing
    assert listing.count("rtscinv_") == body.count("rtscinv_") - 2  # prefixes only, no full code


@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("/org/projects/new/", {"prefix": "CSRF"}),
        ("/org/invites/new/", {"expires_days": "7"}),
        ("/org/keys/new/", {"runtime": "codex", "project": "ACME"}),
        ("/issues/{issue}/comments/", {"body": "no token"}),
        ("/org/members/{member_id}/suspend/", {}),
    ],
)
def test_csrf_is_enforced(dash, url, data):
    from tests.dash.conftest import signed_in

    t = targets(dash)
    client = signed_in(dash.w.owner, csrf=True)
    before = state()
    response = client.post(_fill(url, t), data)
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert state() == before


def test_csrf_token_from_the_page_is_accepted(dash):
    from tests.dash.conftest import signed_in

    client = signed_in(dash.w.owner, csrf=True)
    page = client.get("/org/projects/")
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else client.cookies["csrftoken"].value
    response = client.post("/org/projects/new/", {"prefix": "TOK", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Project.objects.filter(org=dash.w.org, prefix="TOK").exists()
