"""The Dash side of issue 18: a structured handoff and acceptance checks on the issue page,
and the OAuth consent page's refusals (the full consent journey runs in Chromium in
tests/mcp/test_oauth.py)."""

from __future__ import annotations

from apps.issues.services import issue_update
from apps.leases import services as leases
from apps.orgs import oauth
from apps.orgs.models import OAuthClient, OAuthCode
from tests.conftest import new_issue


def test_issue_page_shows_the_structured_handoff_and_checks(dash):
    w = dash.w
    new_issue(w.a, "Checked", acceptance=["docs", {"text": "suite green", "check": "tests_green"}])
    token = leases.claim_issue(actor=w.a, identifier="ACME-2")["claimToken"]
    leases.checkpoint(
        actor=w.a, identifier="ACME-2", claim_token=token, note={"done": "parser", "next": "grammar", "branch": "acme-2/checked"}
    )
    issue_update(actor=w.a, identifier="ACME-2", evidence=["README", "1 failed, 3 passed"], claim_token=token)
    page = dash.owner.get("/issues/ACME-2/").content.decode()
    assert '<dl class="meta handoff"><dt>Done</dt>' in page
    assert '<dt>Branch</dt><dd class="mono">acme-2/checked</dd>' in page
    assert "tests_green</span>" in page
    assert "Check fails: the evidence reports failing tests." in page
    # the edit form round-trips the check in its line syntax
    form = dash.owner.get("/issues/ACME-2/edit/").content.decode()
    assert "suite green {tests_green}" in form


def test_consent_page_needs_a_sign_in_and_a_valid_request(dash):
    OAuthClient.objects.create(client_id="c1", name="Hosted agent", redirect_uris=["http://127.0.0.1:9/cb"])
    signed = oauth.consent_request_sign(
        {"client_id": "c1", "redirect_uri": "http://127.0.0.1:9/cb", "code_challenge": "x" * 43, "state": "s", "scopes": []}
    )
    r = dash.anon.get(f"/oauth/consent?request={signed}")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    page = dash.owner.get(f"/oauth/consent?request={signed}").content.decode()
    assert 'id="oauth-client-name">Hosted agent</b>' in page and "http://127.0.0.1:9/cb" in page
    assert dash.owner.get("/oauth/consent?request=forged").status_code == 404
    # a project of another org is refused, nothing written
    r = dash.owner.post("/oauth/consent", {"request": signed, "decision": "approve", "target": f"{w_other(dash)}"})
    assert r.status_code == 400 and OAuthCode.objects.count() == 0
    r = dash.owner.post(
        "/oauth/consent", {"request": signed, "decision": "approve", "target": f"{dash.w.org.pk}:{dash.w.project.pk}"}
    )
    assert r.status_code == 302 and r["Location"].startswith("http://127.0.0.1:9/cb?code=")
    assert OAuthCode.objects.get().project_id == dash.w.project.pk


def w_other(dash) -> str:
    return f"{dash.w.other_org.pk}:{dash.w.other_project.pk}"
