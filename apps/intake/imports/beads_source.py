"""beads JSONL (``.beads/issues.jsonl``): one issue per line, with its labels,
dependencies (``blocks``, ``parent-child``, ``related``, ``discovered-from``) and comments.

The whole file is checked up front: a line that is not a JSON object with an ``id`` and a
``title`` is one clear sentence naming the line, and nothing is written. The project is
the ids' prefix (``bd-12`` -> project ``BD``, number 12 kept); hash ids (``bd-a1b2``) get
the project's next numbers. beads priorities 0 (critical) to 3 map to Retasc urgent to
low; 4 (backlog) to none. Tombstones (deleted issues) are skipped.
"""

from __future__ import annotations

import json
import re

from apps.intake.imports.base import BATCH, Batch, when
from apps.intake.imports.records import CommentRec, IssueRec, LabelRec, Person, ProjectRec, RelationRec, SourceError

STATUS = {"open": "todo", "in_progress": "doing", "blocked": "blocked", "closed": "done"}
PRIORITY = {0: 1, 1: 2, 2: 3, 3: 4, 4: 0}
_ID_RE = re.compile(r"^(?P<prefix>.+)-(?P<rest>[^-]+)$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def parse(upload: bytes) -> list[dict]:
    try:
        text = upload.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError("The file is not UTF-8 text, so it is not a beads issues.jsonl.") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise SourceError(f"Line {n} of the file is not JSON; a beads issues.jsonl has one JSON issue per line.") from None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not isinstance(row.get("title"), str):
            raise SourceError(f"Line {n} of the file is not a beads issue (it needs an id and a title).")
        if not _ID_RE.match(row["id"]):
            raise SourceError(f"Line {n}: the id {row['id'][:40]!r} is not a beads id like bd-12.")
        rows.append(row)
    if not rows:
        raise SourceError("The file has no issues.")
    return rows


def _prefix(issue_id: str) -> tuple[str, int | None]:
    m = _ID_RE.match(issue_id)
    prefix = re.sub(r"[^A-Za-z0-9]", "", m["prefix"]).upper()[:10]
    rest = m["rest"]
    return prefix, int(rest) if rest.isdigit() and len(rest) < 9 else None


def _person(name: str | None, people: dict) -> str | None:
    name = (name or "").strip()
    if not name:
        return None
    if name not in people:
        people[name] = Person(name, name, name if _EMAIL_RE.match(name) else "")
    return name


class BeadsSource:
    name = "beads"

    def __init__(self, upload: bytes):
        self.rows = parse(upload)

    def batches(self, checkpoint: dict):
        people: dict[str, Person] = {}
        projects: dict[str, ProjectRec] = {}
        labels: dict[str, LabelRec] = {}
        issues, relations = [], []
        skipped = 0
        parent_of = {}
        for row in self.rows:
            for dep in row.get("dependencies") or []:
                if isinstance(dep, dict) and dep.get("type") == "parent-child" and dep.get("depends_on_id"):
                    parent_of[dep.get("issue_id") or row["id"]] = dep["depends_on_id"]
        containers = set(parent_of.values())
        for row in self.rows:
            if row.get("status") == "tombstone" or row.get("deleted_at"):
                skipped += 1
                continue
            prefix, number = _prefix(row["id"])
            if prefix not in projects:
                projects[prefix] = ProjectRec(prefix, prefix, prefix)
            if number:
                projects[prefix].counter = max(projects[prefix].counter, 0)
            body_parts = [row.get("description") or ""]
            for title, key in (("Design", "design"), ("Notes", "notes")):
                if row.get(key):
                    body_parts.append(f"## {title}\n\n{row[key]}")
            if row.get("close_reason"):
                body_parts.append(f"Closed: {row['close_reason']}")
            acceptance = [
                line.strip().lstrip("-*").strip()
                for line in (row.get("acceptance_criteria") or "").splitlines()
                if line.strip().lstrip("-*").strip()
            ]
            try:
                priority = PRIORITY.get(int(row.get("priority", 2)), 0)
            except (TypeError, ValueError):
                priority = 0
            rec = IssueRec(
                ext_id=row["id"],
                project=prefix,
                title=row["title"],
                number=number,
                ref=row["id"],
                body="\n\n".join(p for p in body_parts if p) or None,
                work=row.get("issue_type") != "epic" and row["id"] not in containers,
                status=STATUS.get(row.get("status") or "open", "todo"),
                priority=priority,
                assignee=_person(row.get("assignee"), people),
                labels=[str(x) for x in row.get("labels") or [] if x],
                parent=parent_of.get(row["id"]),
                created_at=when(row.get("created_at")),
                updated_at=when(row.get("updated_at")),
                closed_at=when(row.get("closed_at")),
                acceptance=acceptance or None,
                source="beads",
                source_ref=(row.get("external_ref") or row["id"])[:255],
            )
            if row.get("issue_type"):
                rec.labels.append(str(row["issue_type"]))
            for name in rec.labels:
                labels.setdefault(name, LabelRec(name))
            for c in row.get("comments") or []:
                if isinstance(c, dict):
                    rec.comments.append(
                        CommentRec(
                            f"{row['id']}/comment/{c.get('id')}",
                            _person(c.get("author"), people),
                            c.get("text") or "",
                            when(c.get("created_at")),
                        )
                    )
            for dep in row.get("dependencies") or []:
                if not isinstance(dep, dict) or not dep.get("depends_on_id"):
                    continue
                kind, other = dep.get("type"), dep["depends_on_id"]
                this = dep.get("issue_id") or row["id"]
                if kind == "blocks":  # ``this`` depends on ``other``: other blocks this
                    relations.append(RelationRec(other, this, "blocks", when(dep.get("created_at"))))
                elif kind in ("related", "discovered-from"):
                    relations.append(RelationRec(this, other, "related", when(dep.get("created_at"))))
            issues.append(rec)
        # Containers first, so children find their parent in the same run.
        issues.sort(key=lambda r: (r.work, r.created_at.timestamp() if r.created_at else 0))
        start = int(checkpoint.get("offset") or 0)
        total = len(issues)
        first = True
        for at in range(start, max(total, 1), BATCH):
            chunk = issues[at : at + BATCH]
            yield Batch(
                people=list(people.values()) if first else [],
                projects=list(projects.values()) if first else [],
                labels=list(labels.values()) if first else [],
                issues=chunk,
                relations=relations if at + BATCH >= total else [],
                checkpoint={"offset": at + len(chunk), "skippedTombstones": skipped},
                total=total,
            )
            first = False
