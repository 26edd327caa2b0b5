"""What every provider client raises, and the parsing of ``Retry-After``."""

from __future__ import annotations

from email.utils import parsedate_to_datetime

from django.utils import timezone


class SendError(Exception):
    """A failed send. ``retry_after`` (seconds) when the provider said when to come back.

    The message never holds a token, a secret or a URL with one in it: it is stored and shown.
    """

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message[:300]
        self.status = status
        self.retry_after = retry_after


def retry_after(value) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if value in (None, ""):
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        return max(0.0, (parsedate_to_datetime(str(value)) - timezone.now()).total_seconds())
    except (TypeError, ValueError):
        return None
