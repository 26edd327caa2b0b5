"""Invite codes and upload tokens travel in URL paths; a live Daphne run must not print
them, neither in its access log nor in Django's "Not Found"/"Unauthorized" lines."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from apps.core.redact import RedactSecrets, redact
from apps.issues.services import attachment_upload_prepare
from apps.orgs.services import invite_create
from tests.conftest import new_issue
from tests.live import start_daphne


def _call(url: str, method: str = "GET", data: bytes | None = None) -> int:
    request = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow
def test_a_live_run_logs_no_invite_code_and_no_upload_token(tworld, tmp_path):
    _, code = invite_create(actor=tworld.a, expires_days=2)
    issue = new_issue(tworld.a, "Needs a file")
    used = urlsplit(attachment_upload_prepare(actor=tworld.a, issue=issue.identifier)["uploadUrl"]).path
    unused = urlsplit(attachment_upload_prepare(actor=tworld.a, issue=issue.identifier)["uploadUrl"]).path
    bogus_code = "rtscinv_" + "Q" * 24
    server = start_daphne(tmp_path)
    try:
        assert _call(f"{server.base}/invite/{code}/") == 200  # the invite page (access log)
        assert _call(f"{server.base}/invite/{bogus_code}/nothing-here") == 404  # Django's "Not Found: ..."
        assert _call(f"{server.base}{used}?filename=a.txt", "PUT", b"hello") == 201
        assert _call(f"{server.base}{used}?filename=a.txt", "PUT", b"again") == 409  # used up: logged as a refusal
        assert _call(f"{server.base}{unused[:-4]}abcd", "PUT", b"x") == 401  # a tampered token
    finally:
        server.stop()
    log = server.log()
    # The requests were logged (so the check below is about content, not silence) ...
    assert log.count("/invite/rtscinv_[redacted]/") >= 2 and "/api/v1/uploads/[redacted]" in log
    assert "Not Found: /invite/rtscinv_[redacted]/nothing-here" in log
    # ... and no secret made it in.
    token_used, token_unused = used.rsplit("/", 1)[1], unused.rsplit("/", 1)[1]
    for secret in (code, bogus_code, token_used, token_unused, token_unused[:-4], code[8:], token_used[:20]):
        assert secret not in log, secret


def test_the_filter_rewrites_messages_and_arguments():
    record = logging.LogRecord(
        "django.request", logging.WARNING, __file__, 1, "Not Found: %s", ("/invite/rtscinv_abcDEF123_-x/",), None
    )
    assert RedactSecrets().filter(record) is True
    assert record.getMessage() == "Not Found: /invite/rtscinv_[redacted]/"
    plain = logging.LogRecord("x", logging.INFO, __file__, 1, "GET %s", ("/queue/",), None)
    RedactSecrets().filter(plain)
    assert plain.getMessage() == "GET /queue/" and plain.args == ("/queue/",)
    assert redact('"PUT /api/v1/uploads/.eJwNy0:1tX:abc?filename=x" 201') == '"PUT /api/v1/uploads/[redacted]?filename=x" 201'
    assert json.loads(redact(json.dumps({"key": "rtsc_ab12cd34_secretsecret"}))) == {"key": "rtsc_[redacted]"}
