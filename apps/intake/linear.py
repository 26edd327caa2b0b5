"""The Linear GraphQL API client (one module per provider): what the import reads.

Base URL: ``RETASC_LINEAR_API_URL`` (default ``https://api.linear.app/graphql``; the
tests' fake server sets its own). Read-only: only queries are ever sent, never a
mutation. A personal API key goes in ``Authorization`` as is; it is never logged and no
error message carries it.

Pagination is Relay cursors (``first``/``after``, ``pageInfo { hasNextPage endCursor }``).
Rate limits: Linear answers HTTP 400 (or 429) with a GraphQL error whose
``extensions.code`` is ``RATELIMITED`` and ``X-RateLimit-Requests-Reset`` (epoch
milliseconds); the client waits until then (or ``Retry-After``) and asks again, a bounded
number of times.
"""

from __future__ import annotations

import logging
import time

import httpx2
from django.conf import settings

from apps.intake.http import TIMEOUT, ProviderError

DEFAULT_API_URL = "https://api.linear.app/graphql"
PROVIDER = "Linear"
PAGE = 50
MAX_WAIT = 120.0
MAX_RATE_RETRIES = 5

log = logging.getLogger(__name__)

_PERSON = "id name displayName email"
ISSUES_QUERY = f"""
query Issues($team: String!, $first: Int!, $after: String) {{
  issues(first: $first, after: $after, filter: {{ team: {{ key: {{ eq: $team }} }} }}, orderBy: createdAt) {{
    pageInfo {{ hasNextPage endCursor }}
    nodes {{
      id identifier number title description priority dueDate url
      createdAt updatedAt completedAt canceledAt
      state {{ id name type }}
      team {{ id key }}
      assignee {{ {_PERSON} }}
      creator {{ {_PERSON} }}
      parent {{ id identifier }}
      labels(first: 50) {{ nodes {{ id name color }} }}
      comments(first: 100) {{ pageInfo {{ hasNextPage }} nodes {{ id body createdAt user {{ {_PERSON} }} parent {{ id }} }} }}
      attachments(first: 50) {{ nodes {{ id url title createdAt }} }}
      relations(first: 50) {{ nodes {{ id type relatedIssue {{ id identifier }} }} }}
    }}
  }}
}}
"""
TEAMS_QUERY = """
query Teams($first: Int!, $after: String) {
  teams(first: $first, after: $after) {
    pageInfo { hasNextPage endCursor }
    nodes { id key name createdAt issueCount }
  }
}
"""
VIEWER_QUERY = "query Viewer { viewer { id name email } }"


class LinearAuthError(ProviderError):
    """The key was refused: retrying with the same key cannot help."""


def api_url() -> str:
    return settings.RETASC_LINEAR_API_URL or DEFAULT_API_URL


def _wait_of(response: httpx2.Response) -> float:
    headers = response.headers
    value = headers.get("retry-after")
    if value and value.strip().isdigit():
        return float(value)
    for name in ("x-ratelimit-requests-reset", "x-ratelimit-complexity-reset"):
        reset = headers.get(name)
        if reset and reset.strip().isdigit():
            stamp = float(reset)
            stamp = stamp / 1000 if stamp > 1e11 else stamp  # epoch milliseconds (Linear) or seconds
            return max(0.0, stamp - time.time())
    return 5.0


class LinearClient:
    def __init__(self, *, api_key: str, url: str | None = None, sleep=time.sleep):
        if not api_key or not api_key.strip():
            raise LinearAuthError("A Linear API key is required.", status=401)
        headers = {"Authorization": api_key.strip(), "Content-Type": "application/json", "User-Agent": "retasc"}
        self.url = url or api_url()
        self.http = httpx2.Client(headers=headers, timeout=TIMEOUT)
        self.sleep = sleep
        self.waited = 0.0
        self.requests = 0

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def query(self, query: str, variables: dict | None = None, *, what: str = "a query") -> dict:
        """One GraphQL query's ``data``; rate limits waited out, other refusals raised."""
        if query.lstrip().startswith("mutation"):
            raise ValueError("Retasc never writes to Linear")
        for _ in range(MAX_RATE_RETRIES + 1):
            self.requests += 1
            try:
                response = self.http.post(self.url, json={"query": query, "variables": variables or {}})
            except httpx2.HTTPError as exc:
                raise ProviderError(f"Linear could not be reached for {what} ({type(exc).__name__}).") from None
            try:
                body = response.json()
            except ValueError:
                body = None
            errors = (body or {}).get("errors") if isinstance(body, dict) else None
            codes = {((e or {}).get("extensions") or {}).get("code") for e in errors or [] if isinstance(e, dict)}
            if "RATELIMITED" in codes or response.status_code == 429:
                wait = min(_wait_of(response), MAX_WAIT)
                log.info("Linear rate limit reached; waiting %.1fs", wait)
                self.waited += wait
                self.sleep(wait)
                continue
            if response.status_code in (401, 403) or "AUTHENTICATION_ERROR" in codes or "FORBIDDEN" in codes:
                raise LinearAuthError("Linear refused the API key (check that it is a valid personal API key).", status=401)
            if response.status_code >= 400:
                raise ProviderError(f"Linear answered HTTP {response.status_code} to {what}.", status=response.status_code)
            if errors:
                first = errors[0] if isinstance(errors[0], dict) else {}
                message = str(first.get("message") or "an error")[:200]
                raise ProviderError(f"Linear answered {what} with an error: {message}", status=400)
            if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
                raise ProviderError(f"Linear answered {what} with something that is not GraphQL.", status=502)
            return body["data"]
        raise ProviderError(f"Linear kept rate limiting {what}; try again later.", status=429, retry_after=60.0)

    def viewer(self) -> dict:
        return self.query(VIEWER_QUERY, what="the key check")["viewer"]

    def teams(self) -> list[dict]:
        out, after = [], None
        while True:
            data = self.query(TEAMS_QUERY, {"first": PAGE, "after": after}, what="the list of teams")["teams"]
            out.extend(data["nodes"])
            if not data["pageInfo"]["hasNextPage"]:
                return out
            after = data["pageInfo"]["endCursor"]

    def issues_page(self, team_key: str, after: str | None, first: int = PAGE) -> dict:
        """One page of a team's issues: ``{"nodes": [...], "pageInfo": {...}}``."""
        return self.query(ISSUES_QUERY, {"team": team_key, "first": first, "after": after}, what=f"the issues of {team_key}")[
            "issues"
        ]
