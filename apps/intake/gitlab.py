"""The GitLab REST API (v4) client (one module per provider): what writeback needs.

Base URL: the connector's ``apiUrl`` (default ``https://gitlab.com/api/v4``; a
self-hosted GitLab or the tests' fake server set their own). The project is named by
its URL-encoded full path. Idempotent like the GitHub client: read first, note once.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx2

from apps.intake.http import TIMEOUT, request

DEFAULT_API_URL = "https://gitlab.com/api/v4"
PROVIDER = "GitLab"


class GitLabClient:
    def __init__(self, *, api_url: str, token: str | None):
        headers = {"Accept": "application/json", "User-Agent": "retasc"}
        if token:
            headers["PRIVATE-TOKEN"] = token
        self.http = httpx2.Client(base_url=api_url.rstrip("/"), headers=headers, timeout=TIMEOUT)

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method: str, path: str, what: str, **kwargs):
        return request(self.http, method, path, what=what, provider=PROVIDER, **kwargs)

    @staticmethod
    def _project(repo: str) -> str:
        return quote(repo, safe="")

    def issue(self, repo: str, iid: int) -> dict:
        return self._call("GET", f"/projects/{self._project(repo)}/issues/{iid}", f"read issue #{iid}").json()

    def notes(self, repo: str, iid: int) -> list[dict]:
        path = f"/projects/{self._project(repo)}/issues/{iid}/notes"
        return self._call("GET", path, f"list notes of #{iid}", params={"per_page": 100}).json()

    def note(self, repo: str, iid: int, body: str) -> dict:
        path = f"/projects/{self._project(repo)}/issues/{iid}/notes"
        return self._call("POST", path, f"comment on #{iid}", json={"body": body}).json()

    def close_issue(self, repo: str, iid: int) -> dict:
        path = f"/projects/{self._project(repo)}/issues/{iid}"
        return self._call("PUT", path, f"close #{iid}", json={"state_event": "close"}).json()

    def close_with_comment(self, repo: str, iid: int, *, marker: str, comment: str, state_reason: str) -> bool:
        wrote = False
        if not any(marker in (n.get("body") or "") for n in self.notes(repo, iid)):
            self.note(repo, iid, comment)
            wrote = True
        if self.issue(repo, iid).get("state") != "closed":
            self.close_issue(repo, iid)
            wrote = True
        return wrote
