"""The one importer: writes normalized records (``records``) through the unit of work.

Every batch is one ``mutation`` (one transaction): the rows are written with their
content sealed, the keyed search terms with them, one receipt per imported issue,
comment, attachment and relation (the chain advances under the org lock like for every
action), ranks refresh after commit. Each receipt says where the item came from
(``import: {source, id, ref, url}``) and carries its history times (``createdAt``,
``closedAt``): the rows themselves are backdated to them.

Records are recognized by their external id (``ImportedRecord``): an issue seen before is
updated when its keyed digest changed and left alone when not, so a re-import or a
resumed run writes nothing twice. One bad record is reported in the job's errors and
skipped (its own savepoint), never failing the batch.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from collections import Counter
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core import search
from apps.core.errors import ServiceError
from apps.core.formats import iso
from apps.core.unit import mutation
from apps.intake.imports.records import IssueRec, LabelRec, Person, ProjectRec, RelationRec
from apps.intake.models import ImportedRecord, ImportJob
from apps.issues import inputs
from apps.issues.models import CLOSED, Attachment, Checkpoint, Claim, Comment, Issue, Label, Relation, SearchTerm, Status
from apps.issues.ranking import ancestors, lock_org_ranks
from apps.issues.services import FOLDED_FIELDS
from apps.orgs.actor import Actor
from apps.orgs.models import Membership, Project
from apps.orgs.services import PREFIX_RE, placeholder_get_or_create

_LOGIN_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_COLOR_RE = re.compile(r"^#[0-9a-fA-F]{6}$")


class RecordError(Exception):
    """One record cannot be written; the job lists it and goes on."""


def _when(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return None


class Importer:
    def __init__(self, job: ImportJob, actor: Actor):
        self.job = job
        self.actor = actor
        self.org = actor.org
        self.source = job.source
        self.counts: Counter = Counter(job.counts or {})
        self.errors: list = list(job.errors or [])
        self._people: dict[str, int] = {}
        self._projects: dict[str, Project] = {}
        self._issues: dict[str, object] = {}  # ext id -> issue pk
        self._labels: dict[str, Label] = {}
        self._key = search.search_key(str(self.org.pk))
        self.pending: list = list((job.checkpoint or {}).get("pending", []))
        # Per batch: what is already mapped, rows written at the batch's end, numbers.
        self._known: dict[str, dict[str, ImportedRecord]] = {}
        self._new_records: list[ImportedRecord] = []
        self._new_labels: list = []
        self._seq: dict = {}  # project pk -> [issue_seq, numbers taken among those wanted]

    # --- bookkeeping --------------------------------------------------------------------

    def error(self, record: str, message: str) -> None:
        self.counts["errors"] += 1
        if len(self.errors) < ImportJob.MAX_ERRORS:
            self.errors.append({"record": str(record)[:200], "message": str(message)[:300]})

    def digest(self, payload: dict) -> str:
        raw = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":")).encode()
        return hmac.new(self._key, raw, hashlib.sha256).hexdigest()

    def _known_of(self, kind: str, ext_ids) -> dict[str, ImportedRecord]:
        """Mapped records of this batch (read once per batch), else from the table."""
        if kind in self._known:
            return self._known[kind]
        return self._mapped(kind, ext_ids)

    def _mapped(self, kind: str, ext_ids) -> dict[str, ImportedRecord]:
        ext_ids = [e for e in ext_ids if e]
        if not ext_ids:
            return {}
        rows = ImportedRecord.objects.filter(org_id=self.org.pk, source=self.source, kind=kind, external_id__in=ext_ids)
        return {r.external_id: r for r in rows}

    def _map(self, kind: str, ext_id: str, object_id, digest: str = "") -> ImportedRecord:
        now = timezone.now()
        row, made = ImportedRecord.objects.get_or_create(
            org_id=self.org.pk,
            source=self.source,
            kind=kind,
            external_id=ext_id[:255],
            defaults={"object_id": str(object_id), "digest": digest, "job": self.job, "created_at": now, "updated_at": now},
        )
        if not made and (row.object_id != str(object_id) or row.digest != digest):
            ImportedRecord.objects.filter(pk=row.pk).update(object_id=str(object_id), digest=digest, job=self.job, updated_at=now)
        return row

    def _record(self, kind: str, ext_id: str, object_id, digest: str = "") -> ImportedRecord:
        now = timezone.now()
        return ImportedRecord(
            org_id=self.org.pk,
            source=self.source,
            kind=kind,
            external_id=ext_id[:255],
            object_id=str(object_id),
            digest=digest,
            job=self.job,
            created_at=now,
            updated_at=now,
        )

    def _meta(self, ext_id: str, ref: str = "", url: str = "") -> dict:
        meta = {"source": self.source, "id": ext_id, "job": str(self.job.pk)}
        if ref:
            meta["ref"] = ref
        if url:
            meta["url"] = url
        return meta

    # --- people, projects, labels -------------------------------------------------------

    def person(self, ext_id: str | None) -> int | None:
        if not ext_id:
            return None
        return self._people.get(ext_id)

    def write_people(self, people: list[Person]) -> None:
        missing = [p for p in people if p.ext_id and p.ext_id not in self._people]
        if not missing:
            return
        mapped = self._mapped("person", [p.ext_id for p in missing])
        emails = {p.email.strip().lower() for p in missing if p.email}
        members = {}
        if emails:
            for m in (
                Membership.objects.filter(org_id=self.org.pk, user__email__in=emails)
                .exclude(status=Membership.Status.PLACEHOLDER)
                .select_related("user")
            ):
                members[m.user.email.lower()] = m.user_id
        for p in missing:
            email = (p.email or "").strip().lower()
            if email in members:
                self._people[p.ext_id] = members[email]
                continue
            if p.ext_id in mapped:
                user_id = int(mapped[p.ext_id].object_id)
                # A placeholder claimed or merged since points to the real member now.
                self._people[p.ext_id] = user_id
                continue
            login = _LOGIN_BAD.sub("-", p.ext_id).strip("-._")[:60] or "someone"
            if not login[0].isalnum():
                login = "u" + login
            if len(p.ext_id) > 60 or login != p.ext_id:
                login = f"{login[:40]}-{hashlib.sha256(p.ext_id.encode()).hexdigest()[:8]}"
            membership = placeholder_get_or_create(org=self.org, provider=self.source, login=login, name=p.name, email=email)
            self._people[p.ext_id] = membership.user_id
            self._map("person", p.ext_id, membership.user_id)
            self.counts["people"] += 1

    def project(self, ext_id: str) -> Project | None:
        return self._projects.get(ext_id)

    def write_projects(self, projects: list[ProjectRec]) -> None:
        for rec in projects:
            if rec.ext_id in self._projects:
                if rec.counter:
                    project = self._projects[rec.ext_id]
                    Project.objects.filter(pk=project.pk, issue_seq__lt=rec.counter).update(issue_seq=rec.counter)
                continue
            prefix = rec.prefix.strip()
            if not PREFIX_RE.fullmatch(prefix):
                cleaned = re.sub(r"[^A-Za-z0-9]", "", prefix)[:10]
                prefix = cleaned if PREFIX_RE.fullmatch(cleaned) else ("P" + cleaned)[:10].ljust(2, "X")
            project = Project.objects.filter(org_id=self.org.pk, prefix__iexact=prefix).first()
            if project is None:
                project = Project.objects.create(org_id=self.org.pk, prefix=prefix, name=(rec.name or prefix)[:120])
                if rec.created_at:
                    Project.objects.filter(pk=project.pk).update(created_at=rec.created_at)
                self.counts["projects"] += 1
                self._map("project", rec.ext_id, project.pk)
            if rec.counter:
                Project.objects.filter(pk=project.pk, issue_seq__lt=rec.counter).update(issue_seq=rec.counter)
            self._projects[rec.ext_id] = project

    def write_labels(self, labels: list[LabelRec]) -> None:
        for rec in labels:
            self.label(rec.name, rec.color)

    def label(self, name: str, color: str | None = None) -> Label | None:
        name = (name or "").strip()[:60]
        if not name:
            return None
        if name in self._labels:
            return self._labels[name]
        color = color if color and _COLOR_RE.fullmatch(color) else None
        label = Label.objects.filter(org_id=self.org.pk, name=name).first()
        if label is None:
            label = Label.objects.create(org_id=self.org.pk, name=name, **({"color": color.lower()} if color else {}))
            self.counts["labels"] += 1
        self._labels[name] = label
        return label

    # --- issues -------------------------------------------------------------------------

    def issue_pk(self, ext_id: str | None):
        if not ext_id:
            return None
        if ext_id not in self._issues:
            row = self._mapped("issue", [ext_id]).get(ext_id)
            if row is None:
                return None
            self._issues[ext_id] = row.object_id
        return self._issues[ext_id]

    def _fields(self, rec: IssueRec) -> dict:
        """The record as issue fields, validated; RecordError when it cannot be written."""
        title = " ".join((rec.title or "").split())[: inputs.MAX_TITLE] or "(untitled)"
        status = rec.status if rec.status in Status.values else Status.TODO
        try:
            priority = inputs.priority(rec.priority if rec.priority is not None else 0)
        except ServiceError:
            priority = 0
        due = rec.due_at
        if due is not None and not isinstance(due, datetime):
            try:
                due = inputs.due(due, org_timezone=self.org.timezone)
            except ServiceError as exc:
                raise RecordError(exc.message) from None
        created = _when(rec.created_at) or timezone.now()
        closed = _when(rec.closed_at) if status in CLOSED else None
        if status in CLOSED and closed is None:
            closed = _when(rec.updated_at) or created
        cancel = rec.cancel_reason if status == Status.CANCELED else None
        if status == Status.CANCELED and not cancel:
            cancel = f"Canceled in {self.source}."
        return {
            "title": title,
            "body": rec.body or None,
            "status": status,
            "priority": priority,
            "work": bool(rec.work),
            "due_at": due,
            "assignee_id": self.person(rec.assignee),
            "author_id": self.person(rec.author),
            "created_at": created,
            "updated_at": _when(rec.updated_at) or created,
            "closed_at": closed,
            "cancel_reason": cancel,
            "acceptance": rec.acceptance or None,
            "evidence": rec.evidence or None,
            "no_dependency": rec.no_dependency or None,
            "awaiting_triage": bool(rec.awaiting_triage),
            "reclaim_count": max(0, int(rec.reclaim_count or 0)),
        }

    def _issue_digest(self, rec: IssueRec, fields: dict) -> str:
        payload = {k: v for k, v in fields.items() if k not in ("updated_at",)}
        payload["labels"] = sorted(set(rec.labels))
        payload["parent"] = rec.parent
        return self.digest(payload)

    def _number(self, project: Project, wanted: int | None) -> int:
        """The issue's number: the upstream one when free, else the project's next.

        The project row is locked once per batch (as ``issue_create`` locks it, so a
        concurrent creation waits for the batch) and the counter is written at its end."""
        slot = self._seq.get(project.pk)
        if slot is None:
            seq = Project.objects.select_for_update().values_list("issue_seq", flat=True).get(pk=project.pk)
            slot = self._seq[project.pk] = [seq, set(), project]
        if wanted and wanted > 0 and wanted not in slot[1]:
            if wanted > slot[0] or not Issue.objects.filter(project_id=project.pk, number=wanted).exists():
                slot[1].add(wanted)
                slot[0] = max(slot[0], wanted)
                return wanted
        slot[0] += 1
        while slot[0] in slot[1]:
            slot[0] += 1
        slot[1].add(slot[0])
        return slot[0]

    @staticmethod
    def _state(issue: Issue, labels: list[str]) -> dict:
        """The issue's state in receipt terms (what folding its receipts rebuilds)."""
        state = {
            "title": issue.title,
            "body": issue.body,
            "status": issue.status,
            "priority": issue.priority,
            "work": issue.work,
            "dueAt": issue.due_at.isoformat() if issue.due_at else None,
            "assignee": issue.assignee_id,
            "labels": sorted(labels),
            "acceptance": issue.acceptance,
            "evidence": issue.evidence,
            "cancelReason": issue.cancel_reason,
            "parent": issue.parent.identifier if issue.parent_id else None,
            "awaitingTriage": issue.awaiting_triage,
            "checkpoint": issue.checkpoint.note if issue.checkpoint_id else None,
            "reclaimCount": issue.reclaim_count,
        }
        assert set(state) == set(FOLDED_FIELDS)
        return state

    def write_issue(self, rec: IssueRec, unit, terms: list) -> None:
        project = self.project(rec.project)
        if project is None:
            raise RecordError(f"its project {rec.project!r} was not imported")
        fields = self._fields(rec)
        digest = self._issue_digest(rec, fields)
        existing = self._known_of("issue", [rec.ext_id]).get(rec.ext_id)
        issue = None
        if existing is None and rec.ext_id in self._issues:
            self.counts["unchanged"] += 1  # the same record twice in one run
            return
        if existing is not None and existing.digest == digest and self._children_known(rec):
            # Unchanged, and nothing new under it: not even read.
            self._issues[rec.ext_id] = existing.object_id
            self.counts["unchanged"] += 1
            return
        if existing is not None:
            issue = (
                Issue.objects.select_related("project", "parent__project", "checkpoint")
                .filter(pk=existing.object_id, org_id=self.org.pk)
                .first()
            )
        if issue is not None:
            self._issues[rec.ext_id] = issue.pk
            if existing.digest == digest:
                self.counts["unchanged"] += 1
            else:
                self._update(issue, rec, fields, unit, terms)
                ImportedRecord.objects.filter(pk=existing.pk).update(digest=digest, job=self.job, updated_at=timezone.now())
                self.counts["updated"] += 1
        else:
            issue = self._create(project, rec, fields, unit, terms)
            self._new_records.append(self._record("issue", rec.ext_id, issue.pk, digest))
            self._issues[rec.ext_id] = issue.pk
            self.counts["created"] += 1
            self.counts["issues"] += 1
        self._children(issue, rec, unit)

    def _children_known(self, rec: IssueRec) -> bool:
        comments = self._known_of("comment", [c.ext_id for c in rec.comments])
        attachments = self._known_of("attachment", [a.ext_id for a in rec.attachments])
        return all(c.ext_id in comments for c in rec.comments) and all(a.ext_id in attachments for a in rec.attachments)

    def _create(self, project: Project, rec: IssueRec, fields: dict, unit, terms: list) -> Issue:
        number = self._number(project, rec.number)
        parent = self._parent_row(rec.parent, rec.ext_id)
        issue = Issue(
            org_id=self.org.pk,
            project=project,
            number=number,
            work=fields["work"],
            status=fields["status"],
            priority=fields["priority"],
            due_at=fields["due_at"],
            assignee_id=fields["assignee_id"],
            author_id=fields["author_id"],
            parent=parent,
            awaiting_triage=fields["awaiting_triage"],
            reclaim_count=fields["reclaim_count"],
            source=(rec.source or self.source)[:20],
            source_ref=(rec.source_ref or "")[:255],
            created_at=fields["created_at"],
            updated_at=fields["updated_at"],
            closed_at=fields["closed_at"],
            rank_dirty=True,
        )
        for attr in ("title", "body", "acceptance", "evidence", "cancel_reason", "no_dependency"):
            setattr(issue, attr, fields[attr])
        issue.save(force_insert=True)
        terms.extend(
            SearchTerm(org_id=self.org.pk, issue_id=issue.pk, term=t)
            for t in search.hashed(self._key, search.terms(issue.title) | search.terms(issue.body))
        )
        labels = [label for label in (self.label(n) for n in dict.fromkeys(rec.labels)) if label is not None]
        if labels:
            self._new_labels.extend(Issue.labels.through(issue_id=issue.pk, label_id=lb.pk) for lb in labels)
        if parent is not None and parent.work:
            self._containerize(parent, unit)
        checkpoint_note = None
        for cp in rec.checkpoints:
            row = Checkpoint(
                org_id=self.org.pk,
                issue=issue,
                author_id=self.person(cp.author),
                runtime=(cp.runtime or "import")[:40],
                created_at=_when(cp.created_at) or fields["created_at"],
            )
            row.note = cp.note
            row.save(force_insert=True)
            issue.checkpoint = row
            checkpoint_note = cp.note
        if checkpoint_note is not None and issue.status not in CLOSED:
            Issue.objects.filter(pk=issue.pk).update(checkpoint=issue.checkpoint)
        elif checkpoint_note is not None:
            issue.checkpoint = None
        unit.rank_dirty(issue.pk)
        state = self._state(issue, [label.name for label in labels])
        changes = {f: [None, v] for f, v in state.items()}
        changes["createdAt"] = [None, iso(issue.created_at)]
        if issue.closed_at:
            changes["closedAt"] = [None, iso(issue.closed_at)]
        if fields["no_dependency"]:
            changes["noDependency"] = [None, fields["no_dependency"]]
        changes["import"] = self._meta(rec.ext_id, rec.ref, rec.url)
        unit.record("imported", issue=issue, changes=changes)
        return issue

    def _parent_row(self, ext_id: str | None, child_ext: str) -> Issue | None:
        pk = self.issue_pk(ext_id)
        if pk is None:
            if ext_id:
                self.pending.append(["parent", ext_id, child_ext])  # set once the parent arrives
            return None
        return Issue.objects.select_related("project").filter(pk=pk, org_id=self.org.pk).first()

    def _containerize(self, parent: Issue, unit) -> None:
        """A parent is a container (SPEC §3): work:false, with its receipt."""
        if not parent.work:
            return
        Issue.objects.filter(pk=parent.pk).update(work=False)
        parent.work = False
        unit.record("updated", issue=parent, changes={"work": [True, False], "import": self._meta("parent")})

    def _update(self, issue: Issue, rec: IssueRec, fields: dict, unit, terms: list) -> None:
        diff: dict = {}
        update: set = set()
        for field, attr, column in (
            ("title", "title", "title_enc"),
            ("body", "body", "body_enc"),
            ("status", "status", None),
            ("priority", "priority", None),
            ("work", "work", None),
            ("acceptance", "acceptance", "acceptance_enc"),
            ("evidence", "evidence", "evidence_enc"),
            ("cancelReason", "cancel_reason", "cancel_reason_enc"),
            ("awaitingTriage", "awaiting_triage", None),
        ):
            before, after = getattr(issue, attr), fields[attr]
            if before != after:
                diff[field] = [before, after]
                setattr(issue, attr, after)
                update.add(column or attr)
        before_due = issue.due_at.isoformat() if issue.due_at else None
        after_due = fields["due_at"].isoformat() if fields["due_at"] else None
        if before_due != after_due:
            diff["dueAt"] = [before_due, after_due]
            issue.due_at = fields["due_at"]
            update.add("due_at")
        if issue.assignee_id != fields["assignee_id"]:
            diff["assignee"] = [issue.assignee_id, fields["assignee_id"]]
            issue.assignee_id = fields["assignee_id"]
            update.add("assignee")
        if issue.closed_at != fields["closed_at"] and ("status" in diff or fields["closed_at"] is None):
            diff["closedAt"] = [iso(issue.closed_at), iso(fields["closed_at"])]
            issue.closed_at = fields["closed_at"]
            update.add("closed_at")
        if "status" in diff and fields["status"] in CLOSED and issue.checkpoint_id:
            diff["checkpoint"] = [issue.checkpoint.note, None]
            issue.checkpoint = None
            update.add("checkpoint")
        if "status" in diff and fields["status"] in CLOSED and issue.lease_claim_id:
            # Closed at the source: the source is the truth, and a close ends the claim
            # (as a connector's close does, apps.issues.services.issue_update unfenced).
            Claim.objects.filter(pk=issue.lease_claim_id, ended_at__isnull=True).update(
                ended_at=timezone.now(), end_reason=Claim.End.REVOKED
            )
            issue.lease_claim_id = issue.lease_principal_id = issue.lease_expires_at = None
            update.update({"lease_claim_id", "lease_principal_id", "lease_expires_at"})
        before_labels = sorted(issue.labels.values_list("name", flat=True))
        wanted = [label for label in (self.label(n) for n in dict.fromkeys(rec.labels)) if label is not None]
        after_labels = sorted(label.name for label in wanted)
        if before_labels != after_labels:
            issue.labels.set(wanted)
            diff["labels"] = [before_labels, after_labels]
        parent = self._parent_row(rec.parent, rec.ext_id) if rec.parent else None
        if (parent.pk if parent else None) != issue.parent_id and (parent is not None or not rec.parent):
            before = issue.parent.identifier if issue.parent_id else None
            diff["parent"] = [before, parent.identifier if parent else None]
            issue.parent = parent
            update.add("parent")
            if parent is not None and parent.work:
                self._containerize(parent, unit)
        if not diff:
            return
        issue.updated_at = fields["updated_at"] if fields["updated_at"] > issue.updated_at else timezone.now()
        update.add("updated_at")
        issue.save(update_fields=sorted(update))
        if {"title", "body"} & diff.keys():
            SearchTerm.objects.filter(issue_id=issue.pk).delete()
            terms.extend(
                SearchTerm(org_id=self.org.pk, issue_id=issue.pk, term=t)
                for t in search.hashed(self._key, search.terms(issue.title) | search.terms(issue.body))
            )
        if {"priority", "dueAt", "status"} & diff.keys():
            unit.rank_dirty(issue.pk)
        diff["import"] = self._meta(rec.ext_id, rec.ref, rec.url)
        unit.record("updated", issue=issue, changes=diff)

    def _children(self, issue: Issue, rec: IssueRec, unit) -> None:
        """Comments and attachments: new ones added (in their order), known ones left."""
        comment_ids = [c.ext_id for c in rec.comments]
        known = self._known_of("comment", comment_ids)
        rows = []
        for c in rec.comments:
            if c.ext_id in known:
                continue
            body = c.body or "(empty comment)"
            if c.reply_to:
                body = f"(in reply to {c.reply_to})\n\n{body}"
            row = Comment(
                org_id=self.org.pk,
                issue=issue,
                author_id=self.person(c.author),
                runtime=(c.runtime or "import")[:40],
                created_at=_when(c.created_at) or issue.created_at,
                retracted_at=_when(c.retracted_at),
                retracted_by_id=self.person(c.retracted_by),
            )
            row.body = body
            if c.retract_note:
                row.retract_note = c.retract_note
            rows.append((c, row))
        if rows:
            Comment.objects.bulk_create([r for _, r in rows])
            self._new_records.extend(self._record("comment", c.ext_id, r.pk) for c, r in rows)
            for c, r in rows:
                changes = {"comment": [None, {"id": str(r.pk), "body": r.body}], "createdAt": [None, iso(r.created_at)]}
                changes["import"] = self._meta(c.ext_id)
                unit.record("commented", issue=issue, changes=changes)
            self.counts["comments"] += len(rows)
        known = self._known_of("attachment", [a.ext_id for a in rec.attachments])
        atts = []
        for a in rec.attachments:
            if a.ext_id in known:
                continue
            try:
                url = inputs.url(a.url)
            except ServiceError:
                self.error(a.ext_id, f"attachment of {rec.ref or rec.ext_id} has no usable URL")
                continue
            row = Attachment(
                org_id=self.org.pk,
                issue=issue,
                created_by_id=self.person(a.author),
                created_at=_when(a.created_at) or issue.created_at,
                obsolete_at=_when(a.obsolete_at),
            )
            row.url = url
            row.title = (a.title or None) and " ".join(a.title.split())[:300]
            if a.obsolete_reason:
                row.obsolete_reason = a.obsolete_reason
            atts.append((a, row))
        if atts:
            Attachment.objects.bulk_create([r for _, r in atts])
            self._new_records.extend(self._record("attachment", a.ext_id, r.pk) for a, r in atts)
            for a, r in atts:
                changes = {"attachment": [None, {"id": str(r.pk), "url": r.url, "title": r.title}]}
                changes["import"] = self._meta(a.ext_id)
                unit.record("attached", issue=issue, changes=changes)
            self.counts["attachments"] += len(atts)

    # --- relations ----------------------------------------------------------------------

    def write_relation(self, rec: RelationRec, unit) -> bool:
        """True when written or already there; False when an end is not imported yet."""
        src, tgt = self.issue_pk(rec.source), self.issue_pk(rec.target)
        if src is None or tgt is None:
            return False
        if str(src) == str(tgt):
            raise RecordError("an issue cannot relate to itself")
        kind = rec.type if rec.type in Relation.Type.values else "related"
        if kind == "blocks":
            exists = Relation.objects.filter(source_id=src, target_id=tgt, type=kind).exists()
        else:
            exists = Relation.objects.filter(type=kind, source_id__in=[src, tgt], target_id__in=[src, tgt]).exists()
        if exists:
            return True
        if kind == "blocks" and _uuid(tgt) in ancestors([_uuid(src)]):
            raise RecordError("it would close a cycle of blocks")
        ends = {i.pk: i for i in Issue.objects.select_related("project").filter(pk__in=[src, tgt], org_id=self.org.pk)}
        source, target = ends.get(_uuid(src)), ends.get(_uuid(tgt))
        if source is None or target is None:
            return False
        Relation.objects.create(
            org_id=self.org.pk, source=source, target=target, type=kind, created_at=_when(rec.created_at) or timezone.now()
        )
        change = {"relation": [None, [kind, source.identifier, target.identifier]], "import": {"source": self.source}}
        unit.record("relation_added", issue=source, changes=change)
        if kind == "blocks":
            unit.record("relation_added", issue=target, changes=change)
            unit.rank_dirty(source.pk)
        self.counts["relations"] += 1
        return True

    def _parent_fixup(self, child_ext: str, parent_ext: str, unit) -> bool:
        child_pk, parent_pk = self.issue_pk(child_ext), self.issue_pk(parent_ext)
        if child_pk is None or parent_pk is None:
            return False
        child = Issue.objects.select_related("project", "parent__project").get(pk=child_pk)
        parent = Issue.objects.select_related("project").get(pk=parent_pk)
        if child.parent_id == parent.pk:
            return True
        node, seen = parent, set()
        while node is not None and node.pk not in seen:
            if node.pk == child.pk:
                raise RecordError("parents would loop")
            seen.add(node.pk)
            node = node.parent
        before = child.parent.identifier if child.parent_id else None
        Issue.objects.filter(pk=child.pk).update(parent=parent)
        unit.record("updated", issue=child, changes={"parent": [before, parent.identifier], "import": self._meta(child_ext)})
        self._containerize(parent, unit)
        return True

    # --- a batch ------------------------------------------------------------------------

    def write_batch(
        self, *, people=(), projects=(), labels=(), issues=(), relations=(), parents=(), checkpoint=None, final=False
    ) -> None:
        """One transaction: everything given, then whatever was pending and now resolves."""
        with mutation(self.actor, "import", charge=False) as unit:
            lock_org_ranks(self.org.pk)  # the rank lock first (apps.work.writer's order)
            self.write_people(list(people))
            self.write_projects(list(projects))
            self.write_labels(list(labels))
            terms: list = []
            issues = list(issues)
            # What of this batch is already imported: three reads for the whole batch.
            self._known = {
                "issue": self._mapped("issue", [r.ext_id for r in issues]),
                "comment": self._mapped("comment", [c.ext_id for r in issues for c in r.comments]),
                "attachment": self._mapped("attachment", [a.ext_id for r in issues for a in r.attachments]),
            }
            self._seq = {}
            try:
                for rec in issues:
                    self._guarded(rec.ref or rec.ext_id, unit, lambda r=rec: self.write_issue(r, unit, terms))
                    self.job.done += 1
            finally:
                self._known = {}
            # The rows every record of the batch added, in a few statements.
            if terms:
                SearchTerm.objects.bulk_create(terms, batch_size=5000, ignore_conflicts=True)
            if self._new_labels:
                Issue.labels.through.objects.bulk_create(self._new_labels, batch_size=5000)
            if self._new_records:
                ImportedRecord.objects.bulk_create(self._new_records, batch_size=5000)
            for seq, _, project in self._seq.values():
                Project.objects.filter(pk=project.pk, issue_seq__lt=seq).update(issue_seq=seq)
            self._new_labels, self._new_records, self._seq = [], [], {}
            for child, parent in parents:
                self.pending.append(["parent", parent, child])
            for rel in relations:
                self.pending.append(["relation", rel.source, rel.target, rel.type, iso(rel.created_at)])
            self._flush_pending(unit, final=final)
            self._save_job(checkpoint or {})

    def _guarded(self, name: str, unit, fn) -> bool:
        """Run one record's writes in a savepoint; its receipts count only if it stays."""
        mark = len(unit.entries)
        marks = (len(self._new_records), len(self._new_labels))
        dirty = set(unit.dirty_ranks)
        try:
            with transaction.atomic():
                fn()
            return True
        except (RecordError, ServiceError, IntegrityError, ValueError) as exc:
            del unit.entries[mark:]
            del self._new_records[marks[0] :]
            del self._new_labels[marks[1] :]
            unit.dirty_ranks = dirty
            message = (
                exc.message
                if isinstance(exc, ServiceError)
                else str(exc)
                if isinstance(exc, RecordError)
                else "it could not be written"
            )
            self.error(name, message)
            self.counts["skipped"] += 1
            return False

    def _flush_pending(self, unit, *, final: bool) -> None:
        still = []
        for item in self.pending:
            kind = item[0]
            if kind == "parent":
                _, parent_ext, child_ext = item
                fn = lambda p=parent_ext, c=child_ext: self._parent_fixup(c, p, unit)  # noqa: E731
                name = f"parent of {child_ext}"
            else:
                _, src, tgt, typ, at = item
                rec = RelationRec(src, tgt, typ, datetime.fromisoformat(at) if at else None)
                fn = lambda r=rec: self.write_relation(r, unit)  # noqa: E731
                name = f"{typ} {src} -> {tgt}"
            ok = {"v": False}

            def run(fn=fn, ok=ok):
                ok["v"] = fn()

            if self._guarded(name, unit, run) and not ok["v"]:
                if final:
                    self.error(name, "the other end was not imported")
                    self.counts["skipped"] += 1
                else:
                    still.append(item)
        self.pending = still

    def _save_job(self, checkpoint: dict) -> None:
        """In the batch's transaction: where a resumed run starts is exactly what committed."""
        job = self.job
        job.counts = dict(self.counts)
        job.errors = self.errors
        job.checkpoint = {**(job.checkpoint or {}), **checkpoint, "pending": self.pending}
        job.updated_at = timezone.now()
        ImportJob.objects.filter(pk=job.pk).update(
            counts=job.counts,
            errors=job.errors,
            checkpoint=job.checkpoint,
            done=job.done,
            total=job.total,
            updated_at=job.updated_at,
        )


def _uuid(value):
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
