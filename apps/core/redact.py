"""Secrets never reach a log line: invite codes and upload tokens travel in URL paths
(``/invite/rtscinv_…/``, ``/api/v1/uploads/<token>``), and paths are what access logs
and Django's "Not Found: <path>" lines print. Both are redacted here:

- ``RedactSecrets``, a logging filter on every handler Retasc configures (settings
  ``LOGGING``), rewrites any record whose message carries a secret;
- ``redact_daphne_access_log()`` puts the same rewrite in front of Daphne's access log,
  which writes to a stream of its own, not through ``logging``.
"""

from __future__ import annotations

import logging
import re

REDACTED = "[redacted]"

_PATTERNS = (
    # Credentials Retasc issues: a fixed prefix, then the secret part (agent keys, invite
    # codes, personal tokens, device codes, claim tokens).
    (re.compile(r"\b(rtsc(?:inv|pat|dev)?_|rtclm_)(?!\[redacted\])[A-Za-z0-9_\-]+"), r"\1" + REDACTED),
    # Capability URLs: the path segment is the secret (a URL pattern's <placeholder> is not).
    (re.compile(r"(/uploads/)(?!<)[^/\s?#\"']+"), r"\1" + REDACTED),
    (re.compile(r"(/invite/)(?!<|rtscinv_\[)[^/\s?#\"']+"), r"\1" + REDACTED),
    # Bearer headers, and password/token/code values in queries and JSON bodies.
    (re.compile(r"(?i)\b(bearer\s+)[^\s\"',]+"), r"\1" + REDACTED),
    (re.compile(r"(?i)\b(password\d?|passwd|secret|token|code|key)=[^&\s\"']+"), r"\1=" + REDACTED),
    (
        re.compile(r"(?i)(\"(?:password\d?|secret|token|code|key|claimToken)\"\s*:\s*\")(?![a-z]*_\[redacted\]\")[^\"]*"),
        r"\1" + REDACTED,
    ),
)


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactSecrets(logging.Filter):
    """Rewrites a record's message when it carries a secret; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's to report
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def redact_daphne_access_log() -> None:
    """Daphne's access log (``AccessLogGenerator``) writes ``"GET /path"`` straight to a
    stream. Its writer is wrapped once, at start-up (retasc/asgi.py, which Daphne imports
    before it builds the logger), so every entry is redacted before it is written."""
    from daphne import access  # deferred: only a Daphne process has an access log

    writer = access.AccessLogGenerator.write_entry
    if getattr(writer, "retasc_redacted", False):
        return

    def write_entry(self, host, date, request, *args, **kwargs):
        return writer(self, host, date, redact(request), *args, **kwargs)

    write_entry.retasc_redacted = True
    access.AccessLogGenerator.write_entry = write_entry
