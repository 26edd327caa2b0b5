"""Log records: a request id on every line, secrets never written, JSON lines on request.

- ``request_id``: a context variable set per HTTP request (``apps.ops.asgi``) and per
  Celery task (``retasc.celery``, from the publishing request's task header). Worker
  threads that serve the request inherit it (asgiref and anyio copy the context).
- ``TextFormatter`` / ``JsonFormatter`` (``RETASC_LOG_FORMAT=json``): one line per
  record, carrying ``request_id``. Both pass the finished line through ``redact``, which
  masks every credential shape Retasc issues (agent keys, invite codes, claim tokens,
  CLI tokens, device codes, upload URLs, bearer headers, password/token/code query
  parameters): a library that logs a URL or a header does not leak one.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import uuid
from datetime import UTC, datetime

from apps.core.redact import redact

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("retasc_request_id", default="")

# An incoming X-Request-Id is kept only when it is short and made of safe characters;
# otherwise a fresh one is made (a header cannot inject into logs or responses).
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


def accept_request_id(value: str | None) -> str:
    """The incoming id when it is short and safe, else a fresh one."""
    if value and _SAFE_ID.fullmatch(value):
        return value
    return new_request_id()


def new_request_id() -> str:
    return uuid.uuid4().hex


class TextFormatter(logging.Formatter):
    """``LEVEL logger [request id] message``, redacted."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.request_id = request_id.get() or "-"
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, exception.

    Only these fields are written: ``extra`` objects a library attaches (Django attaches
    the request) are never serialized.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": request_id.get() or None,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return redact(json.dumps(entry, ensure_ascii=False, default=str))


def logging_config(*, fmt: str, level: str) -> dict:
    """The ``LOGGING`` setting: one console handler, text or JSON lines."""
    formatter = "apps.core.logs.JsonFormatter" if fmt == "json" else "apps.core.logs.TextFormatter"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"retasc": {"()": formatter}},
        # The filter rewrites a record's message, the formatter the finished line: a secret
        # in a path, a header or an exception is never written (apps.core.redact).
        "filters": {"redact_secrets": {"()": "apps.core.redact.RedactSecrets"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "retasc", "filters": ["redact_secrets"]}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Our own loggers carry the level too: a Celery worker resets the root's level
            # to its --loglevel (WARNING by default).
            "retasc": {"level": level},
            "apps": {"level": level},
            "django.db.backends": {"level": "INFO"},
            # Daphne and Twisted log through the root logger too: same format, same masking.
            "django": {"handlers": [], "propagate": True},
        },
    }
