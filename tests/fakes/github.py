"""A fake GitHub REST API: the issue endpoints writeback uses, answered like GitHub
(issue objects with ``state`` and ``state_reason``, comments with ids), with the token
checked. Scripted 403/429 with ``Retry-After`` come from the base's ``fail_next``."""

from __future__ import annotations

import itertools

from tests.fakes.base import FakeServer, Request

_ISSUE = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/(?P<n>\d+)"


class FakeGitHub(FakeServer):
    def __init__(self, token: str = "ghp_test_token"):
        super().__init__()
        self.token = token
        self.issues: dict[tuple[str, int], dict] = {}
        self._ids = itertools.count(1000)
        self.route("GET", _ISSUE, self._get_issue)
        self.route("PATCH", _ISSUE, self._patch_issue)
        self.route("GET", _ISSUE + "/comments", self._list_comments)
        self.route("POST", _ISSUE + "/comments", self._add_comment)

    def add_issue(self, repo: str, number: int, *, state: str = "open") -> dict:
        issue = {"id": next(self._ids), "number": number, "state": state, "state_reason": None, "comments": []}
        self.issues[(repo, number)] = issue
        return issue

    def issue(self, repo: str, number: int) -> dict:
        return self.issues[(repo, number)]

    def _find(self, req: Request):
        if req.header("authorization") != f"Bearer {self.token}":
            return None, (401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
        issue = self.issues.get((f"{req.match['owner']}/{req.match['repo']}", int(req.match["n"])))
        if issue is None:
            return None, (404, {"message": "Not Found"})
        return issue, None

    def _public(self, issue: dict) -> dict:
        return {k: v for k, v in issue.items() if k != "comments"} | {"comments": len(issue["comments"])}

    def _get_issue(self, req: Request):
        issue, refusal = self._find(req)
        return refusal or (200, self._public(issue))

    def _patch_issue(self, req: Request):
        issue, refusal = self._find(req)
        if refusal:
            return refusal
        body = req.json or {}
        if body.get("state") in ("open", "closed"):
            issue["state"] = body["state"]
            issue["state_reason"] = body.get("state_reason")
        return 200, self._public(issue)

    def _list_comments(self, req: Request):
        issue, refusal = self._find(req)
        return refusal or (200, issue["comments"])

    def _add_comment(self, req: Request):
        issue, refusal = self._find(req)
        if refusal:
            return refusal
        comment = {"id": next(self._ids), "body": (req.json or {}).get("body", "")}
        issue["comments"].append(comment)
        return 201, comment
