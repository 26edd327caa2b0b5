"""A fake Linear GraphQL API (``POST /graphql``), answering the queries the import sends
from data shaped like Linear's schema (Team, Issue, WorkflowState, User, IssueLabel,
Comment, Attachment, IssueRelation; Relay connections with ``pageInfo``).

- The key is checked: a wrong one gets HTTP 400 with ``extensions.code``
  ``AUTHENTICATION_ERROR``, like Linear.
- ``throttle_once_at(n)``: the n-th request gets Linear's rate-limit answer (HTTP 400,
  ``extensions.code`` ``RATELIMITED``, ``X-RateLimit-Requests-*`` headers, the reset in
  epoch milliseconds) once.
- ``fail_page_once(team, page)``: that page of a team's issues answers HTTP 500 once.
- Any ``mutation`` is refused and counted in ``mutations`` (the import never writes).

``LinearData.generate(...)`` builds teams, users and issues (sub-issues, relations,
threaded comments, labels, attachments, due dates, every workflow state type).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tests.fakes.base import FakeServer, Request

STATE_TYPES = ("triage", "backlog", "unstarted", "started", "completed", "canceled")


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class LinearData:
    teams: list = field(default_factory=list)
    users: list = field(default_factory=list)
    issues: list = field(default_factory=list)  # Issue nodes, as the query asks for them

    @classmethod
    def generate(cls, *, teams=("ENG",), issues_per_team=20, seed=7, comments=2, start_number=1) -> LinearData:
        rnd = random.Random(seed)
        data = cls()
        data.users = [
            {"id": f"user-{n}", "name": f"Person {n}", "displayName": f"p{n}", "email": f"person{n}@linear.test"}
            for n in range(1, 6)
        ]
        labels = [
            {"id": "label-bug", "name": "Bug", "color": "#eb5757"},
            {"id": "label-feature", "name": "Feature", "color": "#bb87fc"},
            {"id": "label-infra", "name": "infra", "color": "#4ea7fc"},
        ]
        base = datetime(2025, 1, 1, tzinfo=UTC)
        for t_index, key in enumerate(teams):
            team = {
                "id": f"team-{key}",
                "key": key,
                "name": f"{key} team",
                "createdAt": _iso(base),
                "issueCount": issues_per_team,
            }
            data.teams.append(team)
            nodes = []
            for i in range(issues_per_team):
                number = start_number + i
                created = base + timedelta(hours=t_index * 1000 + i)
                state_type = STATE_TYPES[i % len(STATE_TYPES)]
                node = {
                    "id": f"issue-{key}-{number}",
                    "identifier": f"{key}-{number}",
                    "number": number,
                    "title": f"{key} issue {number}: fix the {rnd.choice(['parser', 'queue', 'cache', 'login'])}",
                    "description": f"Steps for {key}-{number}.\n\nSecret detail LINSECRET{key}{number}.",
                    "priority": i % 5,
                    "dueDate": (created + timedelta(days=30)).date().isoformat() if i % 4 == 0 else None,
                    "url": f"https://linear.app/acme/issue/{key}-{number}",
                    "createdAt": _iso(created),
                    "updatedAt": _iso(created + timedelta(hours=1)),
                    "completedAt": _iso(created + timedelta(days=2)) if state_type == "completed" else None,
                    "canceledAt": _iso(created + timedelta(days=3)) if state_type == "canceled" else None,
                    "state": {"id": f"state-{state_type}", "name": state_type.title(), "type": state_type},
                    "team": {"id": team["id"], "key": key},
                    "assignee": data.users[i % 5] if i % 3 else None,
                    "creator": data.users[(i + 1) % 5],
                    "parent": None,
                    "labels": {"nodes": [labels[i % 3]] + ([labels[(i + 1) % 3]] if i % 7 == 0 else [])},
                    "comments": {"nodes": []},
                    "attachments": {"nodes": []},
                    "relations": {"nodes": []},
                }
                for c in range(comments):
                    cid = f"comment-{key}-{number}-{c}"
                    node["comments"]["nodes"].append(
                        {
                            "id": cid,
                            "body": f"Comment {c} on {key}-{number}",
                            "createdAt": _iso(created + timedelta(minutes=10 * (c + 1))),
                            "user": data.users[(i + c) % 5],
                            "parent": {"id": f"comment-{key}-{number}-0"} if c > 0 else None,
                        }
                    )
                if i % 5 == 0:
                    node["attachments"]["nodes"].append(
                        {
                            "id": f"att-{key}-{number}",
                            "url": f"https://github.com/acme/app/pull/{number}",
                            "title": f"PR {number}",
                            "createdAt": _iso(created),
                        }
                    )
                nodes.append(node)
            # Sub-issues: every 10th issue is the parent of the next two.
            for i in range(0, len(nodes) - 2, 10):
                for child in nodes[i + 1 : i + 3]:
                    child["parent"] = {"id": nodes[i]["id"], "identifier": nodes[i]["identifier"]}
            # Relations: blocks forward (never a cycle), related and duplicate now and then.
            for i in range(len(nodes) - 3):
                if i % 4 == 1:
                    nodes[i]["relations"]["nodes"].append(
                        {
                            "id": f"rel-{nodes[i]['id']}-b",
                            "type": "blocks",
                            "relatedIssue": {"id": nodes[i + 3]["id"], "identifier": nodes[i + 3]["identifier"]},
                        }
                    )
                if i % 9 == 2:
                    nodes[i]["relations"]["nodes"].append(
                        {
                            "id": f"rel-{nodes[i]['id']}-r",
                            "type": "related",
                            "relatedIssue": {"id": nodes[i + 1]["id"], "identifier": nodes[i + 1]["identifier"]},
                        }
                    )
                if i % 25 == 3:
                    nodes[i]["relations"]["nodes"].append(
                        {
                            "id": f"rel-{nodes[i]['id']}-d",
                            "type": "duplicate",
                            "relatedIssue": {"id": nodes[i + 2]["id"], "identifier": nodes[i + 2]["identifier"]},
                        }
                    )
            data.issues.extend(nodes)
        return data


class FakeLinear(FakeServer):
    def __init__(self, data: LinearData, api_key: str = "lin_api_testkey"):
        super().__init__()
        self.data = data
        self.api_key = api_key
        self.mutations = 0
        self.pages_served: list[tuple[str, int]] = []
        self._throttle_at: int | None = None
        self._fail_pages: set[tuple[str, int]] = set()
        self._n = 0
        self.route("POST", r"/graphql", self._graphql)

    @property
    def api_url(self) -> str:
        return f"{self.url}/graphql"

    def throttle_once_at(self, n: int) -> None:
        self._throttle_at = n

    def fail_page_once(self, team: str, page: int) -> None:
        self._fail_pages.add((team, page))

    def _graphql(self, req: Request):
        self._n += 1
        body = req.json or {}
        query = body.get("query") or ""
        variables = body.get("variables") or {}
        if query.lstrip().startswith("mutation"):
            self.mutations += 1
            return 400, {"errors": [{"message": "mutations are not expected", "extensions": {"code": "FORBIDDEN"}}]}
        if req.header("authorization") != self.api_key:
            return 400, {
                "errors": [
                    {
                        "message": "Authentication required, not authenticated",
                        "extensions": {
                            "code": "AUTHENTICATION_ERROR",
                            "type": "authentication error",
                            "userPresentableMessage": "You need to authenticate.",
                        },
                    }
                ]
            }
        if self._throttle_at is not None and self._n >= self._throttle_at:
            self._throttle_at = None
            reset_ms = int((time.time() + 0.05) * 1000)
            headers = {
                "X-RateLimit-Requests-Limit": "1500",
                "X-RateLimit-Requests-Remaining": "0",
                "X-RateLimit-Requests-Reset": str(reset_ms),
            }
            return 400, {"errors": [{"message": "Rate limit exceeded", "extensions": {"code": "RATELIMITED"}}]}, headers
        if "viewer" in query and "issues(" not in query:
            return 200, {"data": {"viewer": {"id": "user-1", "name": "Person 1", "email": "person1@linear.test"}}}
        if "teams(" in query:
            return 200, {"data": {"teams": self._page(self.data.teams, variables)}}
        if "issues(" in query:
            team = variables.get("team")
            nodes = [n for n in self.data.issues if n["team"]["key"] == team]
            first = int(variables.get("first") or 50)
            after = variables.get("after")
            page_no = int(after.split(":")[1]) // first if after else 0
            if (team, page_no) in self._fail_pages:
                self._fail_pages.discard((team, page_no))
                return 500, {"errors": [{"message": "Internal server error"}]}
            self.pages_served.append((team, page_no))
            return 200, {"data": {"issues": self._page(nodes, variables)}}
        return 400, {"errors": [{"message": "Unknown query", "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]}

    @staticmethod
    def _page(nodes: list, variables: dict) -> dict:
        first = int(variables.get("first") or 50)
        after = variables.get("after")
        start = int(after.split(":")[1]) if after else 0
        chunk = nodes[start : start + first]
        end = start + len(chunk)
        return {
            "nodes": chunk,
            "pageInfo": {"hasNextPage": end < len(nodes), "endCursor": f"cursor:{end}" if chunk else after},
        }
