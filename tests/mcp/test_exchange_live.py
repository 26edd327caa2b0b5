"""The single-exchange path (apps.mcp.exchange) answers what the SDK's own transport answers.

Two live servers on the same database: one as deployed (handshake-era POSTs served one
exchange each), one with ``RETASC_MCP_SINGLE_EXCHANGE=false`` (the SDK's per-request
stateless transport). The same raw requests, good and bad, get the same HTTP status,
the same content type and the same JSON-RPC answer from both.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.mcp.test_mcp_live import LEGACY_VERSION, initialize_body, post

pytestmark = pytest.mark.slow

NO_SUCH = {"jsonrpc": "2.0", "id": 7, "method": "no/such/method"}

# (label, body, extra headers): each is sent to both servers.
CASES = [
    ("initialize", initialize_body(), {}),
    (
        "initialize at an older version",
        {**initialize_body(), "params": {**initialize_body()["params"], "protocolVersion": "2024-11-05"}},
        {},
    ),
    (
        "initialize at an unknown version",
        {**initialize_body(), "params": {**initialize_body()["params"], "protocolVersion": "1999-01-01"}},
        {},
    ),
    ("initialized notification", {"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),
    ("a client's response", {"jsonrpc": "2.0", "id": 3, "result": {}}, {}),
    ("ping", {"jsonrpc": "2.0", "id": "p-1", "method": "ping"}, {}),
    ("tools/list", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {}),
    ("tools/call", {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_labels", "arguments": {}}}, {}),
    (
        "a refused tool call",
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "get_issue", "arguments": {"identifier": "ACME-999"}},
        },
        {},
    ),
    (
        "an unknown argument",
        {
            "jsonrpc": "2.0",
            "id": 6,
            "method": "tools/call",
            "params": {"name": "get_issue", "arguments": {"identifer": "ACME-1"}},
        },
        {},
    ),
    (
        "an unknown tool",
        {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}},
        {},
    ),
    ("tools/call without a name", {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"arguments": {}}}, {}),
    ("an unknown method", NO_SUCH, {}),
    ("no protocol version header", {"jsonrpc": "2.0", "id": 10, "method": "ping"}, {"MCP-Protocol-Version": None}),
    ("not JSON", b"{not json", {}),
    ("a batch", [{"jsonrpc": "2.0", "id": 1, "method": "ping"}], {}),
    ("not JSON-RPC", {"hello": "world"}, {}),
    ("a bad request id", {"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}, {}),
    ("not accepting JSON", NO_SUCH, {"Accept": "text/html"}),
    ("not sent as JSON", NO_SUCH, {"Content-Type": "text/plain"}),
    ("a foreign Host", NO_SUCH, {"Host": "evil.example"}),
]


def _send(url: str, key: str, body, headers: dict):
    drop = [name for name, value in headers.items() if value is None]
    sent = {name: value for name, value in headers.items() if value is not None}
    if drop:
        # post() always sets the version header: send this one by hand, without it.
        data = json.dumps(body).encode()
        base = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {key}",
        }
        request = urllib.request.Request(url, data=data, method="POST", headers=base)
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    return post(url, body, key=key, headers=sent)


@pytest.fixture
def both(server_factory, tworld):
    return server_factory(), server_factory(RETASC_MCP_SINGLE_EXCHANGE="false")


def test_the_same_answers_as_the_sdk_transport(both, tworld):
    exchange, sdk = both
    key = tworld.owner_agent.raw
    for label, body, headers in CASES:
        got = _send(exchange.mcp_url, key, body, headers)
        want = _send(sdk.mcp_url, key, body, headers)
        assert got[0] == want[0], (label, got, want)
        assert got[1].get("Content-Type") == want[1].get("Content-Type"), label
        assert got[1].get("mcp-session-id") is None and want[1].get("mcp-session-id") is None, label
        if want[2]:
            # Each server names its own address (websiteUrl): the rest is the same.
            mine, theirs = got[2].replace(exchange.base.encode(), b"BASE"), want[2].replace(sdk.base.encode(), b"BASE")
            if (want[1].get("Content-Type") or "").startswith("application/json"):
                assert json.loads(mine) == json.loads(theirs), (label, got[2], want[2])
            else:
                assert mine == theirs, (label, got[2], want[2])
        else:
            assert got[2] == b"", label
    # And the statuses are the ones the transport is known for.
    statuses = {label: _send(exchange.mcp_url, key, body, headers)[0] for label, body, headers in CASES}
    assert statuses["initialized notification"] == statuses["a client's response"] == 202
    assert statuses["not JSON"] == statuses["a batch"] == 400
    assert statuses["not accepting JSON"] == 406
    assert statuses["a foreign Host"] == 421


def test_answers_without_a_key_are_the_same_401(both, tworld):
    exchange, sdk = both
    got = post(exchange.mcp_url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, key="rtsc_wrong")
    want = post(sdk.mcp_url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, key="rtsc_wrong")
    assert got[0] == want[0] == 401
    assert json.loads(got[2]) == json.loads(want[2]) == {"code": "UNAUTHORIZED", "message": json.loads(want[2])["message"]}


def test_the_initialize_result_names_the_version_the_client_asked_for(both, tworld):
    exchange, _ = both
    status, _, body = post(exchange.mcp_url, initialize_body(), key=tworld.owner_agent.raw)
    result = json.loads(body)["result"]
    assert status == 200 and result["protocolVersion"] == LEGACY_VERSION
    assert result["capabilities"]["tools"] is not None and result["serverInfo"]["name"] == "retasc"
