"""The GitHub REST API client (one module per provider): what writeback needs.

Base URL: the connector's ``apiUrl`` (default ``https://api.github.com``; GitHub
Enterprise and the tests' fake server set their own). Idempotent by construction:
closing reads the issue first and leaves a closed one alone; the comment carries a
marker naming the Retasc identifier and is posted only if no comment has it yet.
"""

from __future__ import annotations

import httpx2

from apps.intake.http import TIMEOUT, request

DEFAULT_API_URL = "https://api.github.com"
PROVIDER = "GitHub"


class GitHubClient:
    def __init__(self, *, api_url: str, token: str | None):
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "retasc"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx2.Client(base_url=api_url.rstrip("/"), headers=headers, timeout=TIMEOUT)

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method: str, path: str, what: str, **kwargs):
        return request(self.http, method, path, what=what, provider=PROVIDER, **kwargs)

    def issue(self, repo: str, number: int) -> dict:
        return self._call("GET", f"/repos/{repo}/issues/{number}", f"read issue #{number}").json()

    def comments(self, repo: str, number: int) -> list[dict]:
        path = f"/repos/{repo}/issues/{number}/comments"
        return self._call("GET", path, f"list comments of #{number}", params={"per_page": 100}).json()

    def comment(self, repo: str, number: int, body: str) -> dict:
        path = f"/repos/{repo}/issues/{number}/comments"
        return self._call("POST", path, f"comment on #{number}", json={"body": body}).json()

    def close_issue(self, repo: str, number: int, *, state_reason: str) -> dict:
        body = {"state": "closed", "state_reason": state_reason}
        return self._call("PATCH", f"/repos/{repo}/issues/{number}", f"close #{number}", json=body).json()

    def close_with_comment(self, repo: str, number: int, *, marker: str, comment: str, state_reason: str) -> bool:
        """Comment once, then close if still open. True when something was written."""
        wrote = False
        if not any(marker in (c.get("body") or "") for c in self.comments(repo, number)):
            self.comment(repo, number, comment)
            wrote = True
        if self.issue(repo, number).get("state") != "closed":
            self.close_issue(repo, number, state_reason=state_reason)
            wrote = True
        return wrote
