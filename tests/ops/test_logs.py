"""Logs: JSON lines with a request id (also the X-Request-Id header), and no secret in
any line, checked against a live server's whole output."""

from __future__ import annotations

import json
import logging
import re
import sys

import httpx2
import pytest

from apps.core.logs import JsonFormatter, TextFormatter, accept_request_id, redact, request_id
from tests.ops.conftest import start_daphne

PASSWORD = "pw-owner-1"  # the personas' password (tests/conftest.py)


def test_an_incoming_request_id_is_kept_only_when_short_and_safe():
    assert accept_request_id("ops-drill-42") == "ops-drill-42"
    assert accept_request_id("a1b2:c3.d4_e5") == "a1b2:c3.d4_e5"
    for unsafe in ("", None, "two words", "x" * 65, 'quote"d', "new\nline", "-leading-dash", "ü"):
        fresh = accept_request_id(unsafe)
        assert fresh != unsafe and re.fullmatch(r"[0-9a-f]{32}", fresh)


def test_redact_masks_every_credential_shape():
    line = (
        "key rtsc_abcd1234_SeCrEt invite rtscinv_XyZ123 claim rtclm_tok pat rtscpat_p dev rtscdev_d "
        "GET /invite/plainCode/ PUT /api/v1/uploads/eyJhIjoxfQ:sig Authorization: Bearer sekrit "
        '?password=hunter2&next=/ token=abc code=BCDF-GHJK {"claimToken": "rtclm_x", "password": "pw"}'
    )
    masked = redact(line)
    for secret in (
        "SeCrEt",
        "XyZ123",
        "rtclm_tok",
        "rtscpat_p",
        "rtscdev_d",
        "plainCode",
        "eyJhIjoxfQ",
        "sekrit",
        "hunter2",
        "abc",
        "BCDF-GHJK",
        '"pw"',
    ):
        assert secret not in masked, secret
    assert "next=/" in masked and "GET /invite/[redacted]/" in masked


def _record(message, *args, exc_info=None):
    return logging.LogRecord("retasc.test", logging.WARNING, __file__, 1, message, args, exc_info)


def test_json_formatter_writes_one_line_with_the_request_id_and_no_extras():
    token = request_id.set("req-1")
    try:
        try:
            raise ValueError("with rtsc_abcd_SECRETPART inside\nand a second line")
        except ValueError:
            record = _record("failed for %s", "rtscinv_SECRET2", exc_info=sys.exc_info())
        record.request = object()  # what Django attaches: never serialized
        line = JsonFormatter().format(record)
    finally:
        request_id.reset(token)
    assert "\n" not in line
    entry = json.loads(line)
    assert set(entry) == {"time", "level", "logger", "message", "request_id", "exception"}
    assert (entry["level"], entry["logger"], entry["request_id"]) == ("WARNING", "retasc.test", "req-1")
    assert entry["message"] == "failed for rtscinv_[redacted]"
    assert "SECRETPART" not in line and "ValueError" in entry["exception"]
    assert TextFormatter().format(_record("plain")).endswith("WARNING retasc.test [-] plain")


@pytest.mark.slow
def test_a_live_server_logs_json_lines_with_request_ids_and_never_a_secret(tworld, tmp_path):
    key = tworld.owner_agent.raw
    server = start_daphne(tmp_path, RETASC_LOG_FORMAT="json", RETASC_LOG_LEVEL="DEBUG")
    try:
        # An agent key: the API, /mcp, and a wrong key of the same shape.
        with httpx2.Client(base_url=server.base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as agent:
            r = agent.get("/api/v1/whoami", headers={"X-Request-Id": "ops-drill-42"})
            assert (r.status_code, r.headers["x-request-id"]) == (200, "ops-drill-42")
            r = agent.post(
                "/mcp",
                headers={"Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}},
            )
            assert r.status_code == 200
            for unsafe in ("two words", "x" * 200):
                r = agent.get("/api/v1/whoami", headers={"X-Request-Id": unsafe})
                assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
        wrong_key = key[:-6] + "ZZZZZZ"
        r = httpx2.get(f"{server.base}/api/v1/whoami", headers={"Authorization": f"Bearer {wrong_key}"})
        assert r.status_code == 401

        # A password login, then an invite code: created, redeemed, and redeemed again (refused).
        owner = _login(server.base, tworld.owner.email)
        r = owner.post("/org/invites/new/", data={"csrfmiddlewaretoken": owner.cookies["csrftoken"], "role": "member"})
        assert r.status_code == 201
        code = re.search(r"rtscinv_[A-Za-z0-9_-]+", r.text).group(0)
        outsider = _login(server.base, tworld.outsider.email)
        for expected in ((302,), (400, 403, 404, 409, 410)):
            r = outsider.post(f"/invite/{code}/", data={"csrfmiddlewaretoken": outsider.cookies["csrftoken"]})
            assert r.status_code in expected, r.status_code
        r = outsider.get("/invite/rtscinv_NoSuchCode12345/")
        assert r.status_code in (200, 404)
        owner.close()
        outsider.close()
    finally:
        server.stop()

    output = server.log()
    for secret in (key, key.split("_")[-1], wrong_key.split("_")[-1], PASSWORD, code, code.removeprefix("rtscinv_")):
        assert secret not in output, f"a secret reached the logs: {secret[:10]}…"
    entries = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert entries, output[-2000:]
    assert all(set(e) >= {"time", "level", "logger", "message", "request_id"} for e in entries)
    access = [e for e in entries if e["logger"] == "retasc.request"]
    assert {"request_id": "ops-drill-42", "message": "GET /api/v1/whoami 200"} in [
        {"request_id": e["request_id"], "message": e["message"].rsplit(" ", 1)[0]} for e in access
    ]
    assert any(e["message"].startswith("POST /invite/<str:code>/ ") for e in access)
    assert all(e["request_id"] for e in access)


def _login(base: str, email: str) -> httpx2.Client:
    http = httpx2.Client(base_url=base, timeout=30, follow_redirects=False)
    assert http.get("/accounts/login/").status_code == 200
    r = http.post(
        "/accounts/login/", data={"csrfmiddlewaretoken": http.cookies["csrftoken"], "login": email, "password": PASSWORD}
    )
    assert r.status_code == 302, r.text[:500]
    return http
