"""The normalized records every import source yields, in the order the importer needs:
people and projects first, then labels, then issues (each with its comments,
attachments and checkpoints), then relations. Times are aware datetimes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class Person:
    ext_id: str
    name: str = ""
    email: str = ""  # the address at the source, when known


@dataclass
class ProjectRec:
    ext_id: str
    prefix: str
    name: str = ""
    created_at: datetime | None = None
    counter: int = 0  # the project's issue counter continues after at least this


@dataclass
class LabelRec:
    name: str
    color: str | None = None


@dataclass
class CommentRec:
    ext_id: str
    author: str | None  # Person.ext_id
    body: str
    created_at: datetime | None = None
    reply_to: str | None = None  # names the comment it answers (Retasc comments are flat)
    runtime: str = "import"
    retracted_at: datetime | None = None
    retracted_by: str | None = None
    retract_note: str | None = None


@dataclass
class AttachmentRec:
    ext_id: str
    url: str
    title: str | None = None
    author: str | None = None
    created_at: datetime | None = None
    obsolete_at: datetime | None = None
    obsolete_reason: str | None = None


@dataclass
class CheckpointRec:
    ext_id: str
    note: str
    author: str | None = None
    runtime: str = "import"
    created_at: datetime | None = None


@dataclass
class IssueRec:
    ext_id: str
    project: str  # ProjectRec.ext_id
    title: str
    number: int | None = None  # kept when free (ENG-42 stays ENG-42)
    ref: str = ""  # the identifier at the source, for the receipt
    url: str = ""
    body: str | None = None
    work: bool = True
    status: str = "todo"
    priority: int = 0
    due_at: datetime | None = None
    assignee: str | None = None
    author: str | None = None
    labels: list[str] = field(default_factory=list)
    parent: str | None = None  # IssueRec.ext_id of the container
    created_at: datetime | None = None
    updated_at: datetime | None = None
    closed_at: datetime | None = None
    cancel_reason: str | None = None
    acceptance: list | None = None
    evidence: list | None = None
    no_dependency: str | None = None
    awaiting_triage: bool = False
    reclaim_count: int = 0
    source: str = ""  # the issue's own ``source`` bookkeeping (a round trip keeps it)
    source_ref: str = ""
    comments: list[CommentRec] = field(default_factory=list)
    attachments: list[AttachmentRec] = field(default_factory=list)
    checkpoints: list[CheckpointRec] = field(default_factory=list)


@dataclass
class RelationRec:
    source: str  # IssueRec.ext_id
    target: str
    type: str  # blocks (source blocks target) | related | duplicate
    created_at: datetime | None = None


class SourceError(Exception):
    """The source refused or cannot be read: one clear sentence for the job's summary."""

    def __init__(self, message: str, *, field: str = "file", resumable: bool = False):
        super().__init__(message)
        self.message = message
        self.field = field
        self.resumable = resumable
