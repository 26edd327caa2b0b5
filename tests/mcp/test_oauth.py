"""MCP authorization (OAuth 2.1) against a live Daphne, driven by the `mcp` SDK's own
client-side OAuth support, with the consent step in a real browser (Playwright + Chromium).

- An OAuth-only client (no header pasted) discovers the protected-resource and
  authorization-server metadata, registers itself, sends the human to the Dash's consent
  page (client name and redirect URI shown; org and project picked), exchanges the code
  with PKCE and then runs the work loop end to end.
- The token is an agent key of that human: runtime from the client's name, on the keys
  page; a refresh rotates it (the old token stops working); revoking it there refuses it.
- The authorize request is refused for a redirect URI that was not registered and without
  a PKCE challenge; a wrong code verifier does not buy a token. Nothing is written then.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import queue
import secrets
import threading
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.conftest import new_issue
from tests.dash.live import CHROMIUM, chromium, signed_in_page, start, sync_playwright

pytestmark = [pytest.mark.slow]

# The consent step needs a browser; the protocol refusals do not.
needs_browser = pytest.mark.skipif(
    sync_playwright is None or not CHROMIUM.exists(),
    reason="needs playwright and /usr/bin/chromium (pip install -r requirements/dev.txt; apt-get install -y chromium)",
)

CALLBACK = "http://127.0.0.1:9/callback"  # never reached: the browser's request is intercepted


@pytest.fixture
def server(transactional_db, tmp_path):
    srv = start(tmp_path)
    yield srv
    srv.stop()


@pytest.fixture
def browser():
    with chromium() as b:
        yield b


class MemoryStorage:
    """``mcp.client.auth.TokenStorage`` in memory: the tokens and the registration."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


def run_oauth_client(url: str, storage: MemoryStorage, urls: queue.Queue, codes: queue.Queue, work):
    """The SDK's OAuth client on its own thread and loop (Playwright owns the test's loop)."""

    async def go():
        import anyio
        import httpx2
        from mcp.client.auth import OAuthClientProvider
        from mcp.client.client import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

        async def redirect_handler(authorization_url: str) -> None:
            urls.put(authorization_url)

        async def callback_handler() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(**await anyio.to_thread.run_sync(lambda: codes.get(timeout=90)))

        auth = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                client_name="Claude",
                redirect_uris=[CALLBACK],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
            ),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )
        async with httpx2.AsyncClient(auth=auth, timeout=60) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                return await work(client)

    out: dict = {}

    def run():
        try:
            out["result"] = asyncio.run(go())
        except BaseException as exc:  # surfaced in the test thread
            out["exc"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


async def call(client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    data = json.loads(result.content[0].text)
    return {"error": result.is_error, **data}


def consent(page, authorization_url: str, *, approve=True) -> dict:
    """The human's part: the consent page, then the browser's redirect to the client."""
    seen: dict = {}

    def intercept(route):
        seen["url"] = route.request.url
        route.fulfill(status=200, body="done")

    page.route(CALLBACK + "**", intercept)
    page.goto(authorization_url)
    page.wait_for_selector("#oauth-consent")
    seen["client_name"] = page.inner_text("#oauth-client-name")
    seen["redirect_uri"] = page.inner_text("#oauth-redirect-uri")
    seen["options"] = page.eval_on_selector_all("#oauth-target option", "els => els.map(e => e.textContent)")
    page.click("#oauth-approve" if approve else "#oauth-deny")
    page.wait_for_timeout(300)
    for _ in range(50):
        if "url" in seen:
            break
        page.wait_for_timeout(100)
    query = parse_qs(urlsplit(seen["url"]).query)
    seen["params"] = {k: v[0] for k, v in query.items()}
    return seen


def http(method: str, url: str, *, data=None, headers=None):
    import httpx2

    with httpx2.Client(timeout=30, follow_redirects=False) as client:
        return client.request(method, url, data=data, headers=headers or {})


def mcp_whoami(server, token: str) -> tuple[int, dict]:
    """One raw tools/call of whoami with a bearer token (stateless transport)."""
    import httpx2

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-06-18",
    }
    with httpx2.Client(timeout=30) as client:
        r = client.post(server.mcp_url, json=body, headers=headers)
    return r.status_code, r.json()


@needs_browser
def test_oauth_only_client_completes_the_work_loop(server, browser, tworld):
    from apps.orgs.models import AgentKey, OAuthGrant

    w = tworld
    new_issue(w.a, "Ship the connector", acceptance=[{"text": "suite green", "check": "tests_green"}])
    storage, urls, codes = MemoryStorage(), queue.Queue(), queue.Queue()

    async def work(client):
        who = await call(client, "whoami")
        claim = await call(client, "next_issue")
        token = claim["claimToken"]
        cp = await call(
            client,
            "checkpoint",
            identifier="ACME-1",
            claimToken=token,
            note={"done": "wired", "next": "tests", "branch": claim["branch"]},
        )
        early = await call(client, "save_issue", identifier="ACME-1", status="done", evidence=["looks fine"], claimToken=token)
        done = await call(
            client, "save_issue", identifier="ACME-1", status="done", evidence=["14 passed in 2.1s"], claimToken=token
        )
        return {"who": who, "claim": claim, "cp": cp, "early": early, "done": done}

    thread, out = run_oauth_client(server.mcp_url, storage, urls, codes, work)
    page = signed_in_page(browser, server, w.owner)
    seen = consent(page, urls.get(timeout=90))
    assert seen["client_name"] == "Claude"
    assert seen["redirect_uri"] == CALLBACK
    assert any("ACME" in option for option in seen["options"])
    assert not any("GLX" in option for option in seen["options"])  # only the human's own orgs
    codes.put({"code": seen["params"]["code"], "state": seen["params"].get("state"), "iss": seen["params"].get("iss")})
    thread.join(120)
    if "exc" in out:
        raise out["exc"]
    result = out["result"]

    # the work loop ran as the human, through a key named after the client
    assert (result["who"]["principal"]["email"], result["who"]["runtime"]) == (w.owner.email, "claude")
    assert result["claim"]["issue"]["identifier"] == "ACME-1"
    assert result["cp"]["handoff"]["done"] == "wired"
    assert (result["early"]["error"], result["early"]["code"]) == (True, "ACCEPTANCE_EVIDENCE_REQUIRED")
    assert result["done"]["status"] == "done"
    key = AgentKey.objects.get(oauth_grant__isnull=False)
    assert (key.user_id, key.runtime, key.label, key.project_id) == (w.owner.pk, "claude", "OAuth: Claude", w.project.pk)
    assert key.expires_at is not None

    # the keys page lists it with a revoke button
    page.goto("/org/keys/")
    assert key.prefix in page.content()

    # a refresh rotates the access and refresh tokens; the old access token stops working
    old = storage.tokens
    client_info = storage.client_info
    r = http(
        "POST",
        f"{server.base}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": old.refresh_token,
            "client_id": client_info.client_id,
            "client_secret": client_info.client_secret,
        },
    )
    assert r.status_code == 200, r.text
    fresh = r.json()
    assert fresh["access_token"] != old.access_token and fresh["refresh_token"] != old.refresh_token
    assert mcp_whoami(server, old.access_token)[0] == 401
    status, body = mcp_whoami(server, fresh["access_token"])
    assert status == 200 and json.loads(body["result"]["content"][0]["text"])["runtime"] == "claude"
    assert AgentKey.objects.filter(oauth_grant__isnull=False).count() == 1  # the same key, rotated
    # the spent refresh token is refused
    r = http(
        "POST",
        f"{server.base}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": old.refresh_token,
            "client_id": client_info.client_id,
            "client_secret": client_info.client_secret,
        },
    )
    assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")

    # revoked on the keys page: the token and its refresh token are refused
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto("/org/keys/")
    page.click(f"form[action='/org/keys/{key.pk}/revoke/'] button")
    page.wait_for_load_state()
    key.refresh_from_db()
    assert key.revoked_at is not None
    status, body = mcp_whoami(server, fresh["access_token"])
    assert (status, body["code"]) == (401, "UNAUTHORIZED")
    r = http(
        "POST",
        f"{server.base}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": fresh["refresh_token"],
            "client_id": client_info.client_id,
            "client_secret": client_info.client_secret,
        },
    )
    assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")
    assert OAuthGrant.objects.count() == 1


def _register(server, name="Hosted agent", redirect=CALLBACK) -> dict:
    import httpx2

    body = {"client_name": name, "redirect_uris": [redirect], "grant_types": ["authorization_code", "refresh_token"]}
    r = httpx2.post(f"{server.base}/register", json=body, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def _authorize_url(server, client_id, *, redirect=CALLBACK, challenge=None) -> str:
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect, "state": "s1"}
    if challenge:
        params.update(code_challenge=challenge, code_challenge_method="S256")
    return f"{server.base}/authorize?{urlencode(params)}"


def _oauth_rows():
    from apps.orgs.models import AgentKey, OAuthCode, OAuthGrant

    return OAuthCode.objects.count(), OAuthGrant.objects.count(), AgentKey.objects.count()


def test_metadata_is_discoverable(server, tworld):
    prm = http("GET", f"{server.base}/.well-known/oauth-protected-resource/mcp").json()
    assert prm["resource"] == server.mcp_url and prm["authorization_servers"] == [server.base]
    assert http("GET", f"{server.base}/.well-known/oauth-protected-resource").json()["resource"] == server.mcp_url
    asm = http("GET", f"{server.base}/.well-known/oauth-authorization-server").json()
    assert asm["code_challenge_methods_supported"] == ["S256"]
    assert asm["registration_endpoint"] == f"{server.base}/register"
    assert asm["revocation_endpoint"] == f"{server.base}/revoke"
    assert set(asm["grant_types_supported"]) >= {"authorization_code", "refresh_token"}
    # a request without a token is told where the metadata is
    r = http("POST", server.mcp_url, data="{}", headers={"Content-Type": "application/json"})
    assert r.status_code == 401 and "/.well-known/oauth-protected-resource/mcp" in r.headers["www-authenticate"]
    # bearer keys keep working unchanged
    status, body = mcp_whoami(server, tworld.owner_agent.raw)
    assert status == 200 and json.loads(body["result"]["content"][0]["text"])["runtime"] == "claude-code"


def test_redirect_uri_mismatch_is_refused(server, tworld):
    client = _register(server)
    _, challenge = _pkce()
    before = _oauth_rows()
    r = http("GET", _authorize_url(server, client["client_id"], redirect="https://evil.test/cb", challenge=challenge))
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"
    assert "location" not in r.headers  # never redirected to the unregistered URI
    assert _oauth_rows() == before


@needs_browser
def test_pkce_is_required(server, browser, tworld):
    client = _register(server)
    before = _oauth_rows()
    # no challenge: the authorize request is refused back to the client, nothing written
    r = http("GET", _authorize_url(server, client["client_id"]))
    location = r.headers.get("location", "")
    assert r.status_code == 302 and location.startswith(CALLBACK)
    assert parse_qs(urlsplit(location).query)["error"] == ["invalid_request"]
    assert _oauth_rows() == before
    # with a challenge: approved in the Dash, but a wrong verifier buys no token
    verifier, challenge = _pkce()
    r = http("GET", _authorize_url(server, client["client_id"], challenge=challenge))
    assert r.status_code == 302 and "/oauth/consent?" in r.headers["location"]
    page = signed_in_page(browser, server, tworld.owner)
    seen = consent(page, r.headers["location"])
    code = seen["params"]["code"]
    token = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK, "client_id": client["client_id"]}
    token["client_secret"] = client["client_secret"]
    r = http("POST", f"{server.base}/token", data={**token, "code_verifier": secrets.token_urlsafe(48)})
    assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")
    r = http("POST", f"{server.base}/token", data={k: v for k, v in token.items()})
    assert r.status_code == 400  # no verifier at all
    from apps.orgs.models import AgentKey

    assert AgentKey.objects.count() == before[2]
    # the right verifier works, once
    r = http("POST", f"{server.base}/token", data={**token, "code_verifier": verifier})
    assert r.status_code == 200 and r.json()["access_token"].startswith("rtsc_")
    r = http("POST", f"{server.base}/token", data={**token, "code_verifier": verifier})
    assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")


@needs_browser
def test_deny_sends_the_client_away_empty_handed(server, browser, tworld):
    client = _register(server)
    _, challenge = _pkce()
    before = _oauth_rows()
    location = http("GET", _authorize_url(server, client["client_id"], challenge=challenge)).headers["location"]
    seen = consent(signed_in_page(browser, server, tworld.owner), location, approve=False)
    assert seen["params"] == {"error": "access_denied", "state": "s1"}
    assert _oauth_rows() == before


@needs_browser
def test_revocation_endpoint_revokes_the_key(server, browser, tworld):
    from apps.orgs.models import AgentKey

    client = _register(server, name="Cursor Cloud")
    verifier, challenge = _pkce()
    location = http("GET", _authorize_url(server, client["client_id"], challenge=challenge)).headers["location"]
    seen = consent(signed_in_page(browser, server, tworld.member), location)
    data = {
        "grant_type": "authorization_code",
        "code": seen["params"]["code"],
        "redirect_uri": CALLBACK,
        "client_id": client["client_id"],
        "client_secret": client["client_secret"],
        "code_verifier": verifier,
    }
    tokens = http("POST", f"{server.base}/token", data=data).json()
    assert json.loads(mcp_whoami(server, tokens["access_token"])[1]["result"]["content"][0]["text"])["runtime"] == "cursor"
    r = http(
        "POST",
        f"{server.base}/revoke",
        data={"token": tokens["refresh_token"], "client_id": client["client_id"], "client_secret": client["client_secret"]},
    )
    assert r.status_code == 200
    assert AgentKey.objects.get(oauth_grant__isnull=False).revoked_at is not None
    assert mcp_whoami(server, tokens["access_token"])[0] == 401
