"""A Retasc JSON export (apps.intake.services.org_export) read back into another org.

Checked whole up front: not JSON, not an export, or another version is one clear
sentence and nothing is written. External ids are ``<exporting org slug>/<identifier>``,
so importing the same export again reconciles instead of duplicating.
"""

from __future__ import annotations

import json

from apps.intake.imports.base import BATCH, Batch, when
from apps.intake.imports.records import (
    AttachmentRec,
    CheckpointRec,
    CommentRec,
    IssueRec,
    LabelRec,
    Person,
    ProjectRec,
    RelationRec,
    SourceError,
)
from apps.intake.services import EXPORT_VERSION


def parse(upload: bytes) -> dict:
    try:
        data = json.loads(upload)
    except (UnicodeDecodeError, ValueError):
        raise SourceError("The file is not JSON, so it is not a Retasc export.") from None
    if not isinstance(data, dict) or data.get("format") != "retasc-export":
        raise SourceError("The file is JSON but not a Retasc export (its format is not retasc-export).")
    version = data.get("version")
    if version != EXPORT_VERSION:
        raise SourceError(f"The export is version {version!r}; this server reads Retasc exports of version {EXPORT_VERSION}.")
    for name in ("projects", "members", "labels", "issues"):
        if not isinstance(data.get(name), list):
            raise SourceError(f"The export has no list of {name}; the file is damaged.")
    for n, issue in enumerate(data["issues"], 1):
        if not isinstance(issue, dict) or not isinstance(issue.get("identifier"), str) or not issue.get("title"):
            raise SourceError(f"Issue {n} of the export has no identifier or title; the file is damaged.")
    return data


class RetascSource:
    name = "retasc"

    def __init__(self, upload: bytes):
        self.data = parse(upload)
        self.slug = str((self.data.get("org") or {}).get("slug") or "export")

    def ext(self, identifier: str) -> str:
        return f"{self.slug}/{identifier}"

    def batches(self, checkpoint: dict):
        data = self.data
        people: dict[str, Person] = {}
        for m in data["members"]:
            if isinstance(m, dict) and m.get("email"):
                people[m["email"]] = Person(m["email"], m.get("name") or "", m["email"])

        def who(email):
            if email and email not in people:
                people[email] = Person(email, "", email)
            return email or None

        projects = [
            ProjectRec(p["prefix"], p["prefix"], p.get("name") or "", when(p.get("createdAt")), int(p.get("issues") or 0))
            for p in data["projects"]
            if isinstance(p, dict) and p.get("prefix")
        ]
        labels = [LabelRec(lb["name"], lb.get("color")) for lb in data["labels"] if isinstance(lb, dict) and lb.get("name")]
        issues, relations, parents = [], [], []
        for i in data["issues"]:
            ident = i["identifier"]
            prefix, _, num = ident.rpartition("-")
            rec = IssueRec(
                ext_id=self.ext(ident),
                project=i.get("project") or prefix,
                title=i["title"],
                number=int(i.get("number") or (num if num.isdigit() else 0)) or None,
                ref=ident,
                body=i.get("body") or None,
                work=bool(i.get("work", True)),
                status=i.get("status") or "todo",
                priority=i.get("priority") or 0,
                due_at=when(i.get("dueAt")),
                assignee=who(i.get("assignee")),
                author=who(i.get("author")),
                labels=list(i.get("labels") or []),
                parent=self.ext(i["parent"]) if i.get("parent") else None,
                created_at=when(i.get("createdAt")),
                updated_at=when(i.get("updatedAt")),
                closed_at=when(i.get("closedAt")),
                cancel_reason=i.get("cancelReason"),
                acceptance=i.get("acceptance") or None,
                evidence=i.get("evidence") or None,
                no_dependency=i.get("noDependency"),
                awaiting_triage=bool(i.get("awaitingTriage")),
                reclaim_count=int(i.get("reclaimCount") or 0),
                source=i.get("source") or "",
                source_ref=i.get("sourceRef") or "",
            )
            for c in i.get("comments") or []:
                rec.comments.append(
                    CommentRec(
                        self.ext(f"comment/{c.get('id')}"),
                        who(c.get("author")),
                        c.get("body") or "",
                        when(c.get("createdAt")),
                        retracted_at=when(c.get("retractedAt")),
                        retracted_by=who(c.get("retractedBy")),
                        retract_note=c.get("retractNote"),
                        runtime=c.get("runtime") or "import",
                    )
                )
            for a in i.get("attachments") or []:
                if a.get("url"):
                    rec.attachments.append(
                        AttachmentRec(
                            self.ext(f"attachment/{a.get('id')}"),
                            a["url"],
                            a.get("title"),
                            who(a.get("createdBy")),
                            when(a.get("createdAt")),
                            when(a.get("obsoleteAt")),
                            a.get("obsoleteReason"),
                        )
                    )
            for cp in i.get("checkpoints") or []:
                rec.checkpoints.append(
                    CheckpointRec(
                        self.ext(f"checkpoint/{cp.get('id')}"),
                        cp.get("note") or "",
                        who(cp.get("author")),
                        cp.get("runtime") or "import",
                        when(cp.get("createdAt")),
                    )
                )
            for r in i.get("relations") or []:
                if r.get("target"):
                    relations.append(
                        RelationRec(rec.ext_id, self.ext(r["target"]), r.get("type") or "related", when(r.get("createdAt")))
                    )
            issues.append(rec)
        # Parents before children: a container sorts ahead of what it contains.
        start = int(checkpoint.get("offset") or 0)
        total = len(issues)
        first = True
        for at in range(start, max(total, 1), BATCH):
            chunk = issues[at : at + BATCH]
            last = at + BATCH >= total
            yield Batch(
                people=list(people.values()) if first else [],
                projects=projects if first else [],
                labels=labels if first else [],
                issues=chunk,
                relations=relations if last else [],
                parents=parents,
                checkpoint={"offset": at + len(chunk)},
                total=total,
            )
            first = False
