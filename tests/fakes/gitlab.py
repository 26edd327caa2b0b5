"""A fake GitLab REST API (v4): the issue and note endpoints writeback uses, answered
like GitLab (``state`` opened/closed, ``state_event=close``), with ``PRIVATE-TOKEN``
checked. The project is named by its URL-encoded full path."""

from __future__ import annotations

import itertools
from urllib.parse import unquote

from tests.fakes.base import FakeServer, Request

_ISSUE = r"/api/v4/projects/(?P<project>[^/]+)/issues/(?P<iid>\d+)"


class FakeGitLab(FakeServer):
    def __init__(self, token: str = "glpat-test-token"):
        super().__init__()
        self.token = token
        self.issues: dict[tuple[str, int], dict] = {}
        self._ids = itertools.count(500)
        self.route("GET", _ISSUE, self._get_issue)
        self.route("PUT", _ISSUE, self._put_issue)
        self.route("GET", _ISSUE + "/notes", self._list_notes)
        self.route("POST", _ISSUE + "/notes", self._add_note)

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v4"

    def add_issue(self, project: str, iid: int, *, state: str = "opened") -> dict:
        issue = {"id": next(self._ids), "iid": iid, "state": state, "notes": []}
        self.issues[(project, iid)] = issue
        return issue

    def issue(self, project: str, iid: int) -> dict:
        return self.issues[(project, iid)]

    def _find(self, req: Request):
        if req.header("private-token") != self.token:
            return None, (401, {"message": "401 Unauthorized"})
        issue = self.issues.get((unquote(req.match["project"]), int(req.match["iid"])))
        if issue is None:
            return None, (404, {"message": "404 Not found"})
        return issue, None

    def _public(self, issue: dict) -> dict:
        return {k: v for k, v in issue.items() if k != "notes"} | {"user_notes_count": len(issue["notes"])}

    def _get_issue(self, req: Request):
        issue, refusal = self._find(req)
        return refusal or (200, self._public(issue))

    def _put_issue(self, req: Request):
        issue, refusal = self._find(req)
        if refusal:
            return refusal
        event = (req.json or {}).get("state_event") or req.query.get("state_event")
        if event == "close":
            issue["state"] = "closed"
        elif event == "reopen":
            issue["state"] = "opened"
        return 200, self._public(issue)

    def _list_notes(self, req: Request):
        issue, refusal = self._find(req)
        return refusal or (200, issue["notes"])

    def _add_note(self, req: Request):
        issue, refusal = self._find(req)
        if refusal:
            return refusal
        note = {"id": next(self._ids), "body": (req.json or {}).get("body", ""), "system": False}
        issue["notes"].append(note)
        return 201, note
