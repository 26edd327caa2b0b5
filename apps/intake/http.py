"""What the provider clients share: one error type that says whether to retry and when.

A provider's answer is turned into ``ProviderError(status, message, retry_after)``. Rate
limits are read from ``Retry-After`` (seconds or an HTTP date) or, failing that, from
``X-RateLimit-Remaining: 0`` with ``X-RateLimit-Reset`` (epoch seconds, GitHub) or
``RateLimit-Reset`` (GitLab). Messages never carry the token.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

import httpx2

TIMEOUT = httpx2.Timeout(15.0, connect=5.0)


class ProviderError(Exception):
    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after

    @property
    def rate_limited(self) -> bool:
        return self.retry_after is not None

    @property
    def permanent(self) -> bool:
        """Retrying cannot help: bad token, no access, no such issue (and no rate limit)."""
        return (
            self.status is not None and 400 <= self.status < 500 and self.status not in (408, 409, 429) and not self.rate_limited
        )


def retry_after(headers, *, now: float | None = None) -> float | None:
    now = time.time() if now is None else now
    value = headers.get("retry-after")
    if value:
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - now)
        except (TypeError, ValueError):
            return None
    if headers.get("x-ratelimit-remaining") == "0" or headers.get("ratelimit-remaining") == "0":
        reset = headers.get("x-ratelimit-reset") or headers.get("ratelimit-reset")
        if reset and reset.strip().isdigit():
            return max(0.0, float(reset) - now)
        return 60.0
    return None


def check(response: httpx2.Response, what: str, provider: str) -> httpx2.Response:
    """Raise ProviderError for a refusal; rate limits (429, or 403 with limit headers) carry retry_after."""
    if response.status_code < 400:
        return response
    wait = retry_after(response.headers) if response.status_code in (403, 429) else None
    if response.status_code == 429 and wait is None:
        wait = 60.0
    raise ProviderError(
        f"{provider} answered HTTP {response.status_code} to {what}.", status=response.status_code, retry_after=wait
    )


def request(client: httpx2.Client, method: str, path: str, *, what: str, provider: str, **kwargs) -> httpx2.Response:
    try:
        response = client.request(method, path, **kwargs)
    except httpx2.HTTPError as exc:
        raise ProviderError(f"{provider} could not be reached for {what} ({type(exc).__name__}).") from None
    return check(response, what, provider)
