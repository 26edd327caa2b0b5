"""Checkpoints: free text, or a structured handoff ``{done, next, gotchas, branch}``.

A structured checkpoint is stored as its canonical JSON text in the sealed note, so the
receipt chain, folding and every reader of the note keep working on one string. Readers
get both: ``checkpoint`` (readable text, for clients that show a note) and ``handoff``
(the object, or null for a free-text note).
"""

from __future__ import annotations

import json

from apps.core.errors import invalid

FIELDS = ("done", "next", "gotchas", "branch")
MAX_NOTE = 50_000
_LABELS = {"done": "Done", "next": "Next", "gotchas": "Gotchas", "branch": "Branch"}


def _field(value, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "\n".join(f"- {v.strip()}" for v in value if v.strip())
    if not isinstance(value, str):
        raise invalid("note", f"checkpoint {name} is text (or a list of text).")
    return value.strip() or None


def parse(value, *, required: bool = True) -> str | None:
    """The note to store: free text as given, or the canonical JSON of a structured one."""
    if value is None or value == "":
        if required:
            raise invalid("note", "note is required: text, or {done, next, gotchas, branch}.")
        return None
    if isinstance(value, dict):
        unknown = set(value) - set(FIELDS)
        if unknown:
            raise invalid("note", f"a structured checkpoint has only {', '.join(FIELDS)}; not {', '.join(sorted(unknown))}.")
        fields = {name: _field(value.get(name), name) for name in FIELDS}
        if not any(fields.values()):
            raise invalid("note", "a structured checkpoint needs at least one of done, next, gotchas, branch.")
        note = json.dumps({k: v for k, v in fields.items() if v}, ensure_ascii=False, separators=(",", ":"))
    elif isinstance(value, str):
        note = value.strip()
        if not note:
            raise invalid("note", "note is required: text, or {done, next, gotchas, branch}.")
    else:
        raise invalid("note", "note is text, or {done, next, gotchas, branch}.")
    if len(note) > MAX_NOTE:
        raise invalid("note", f"note is longer than {MAX_NOTE} characters.")
    return note


def fields(note: str | None) -> dict | None:
    """The structured handoff stored in ``note``, or None for free text."""
    if not note or not note.startswith("{"):
        return None
    try:
        data = json.loads(note)
    except ValueError:
        return None
    if not isinstance(data, dict) or not data or set(data) - set(FIELDS) or not all(isinstance(v, str) for v in data.values()):
        return None
    return {name: data.get(name) for name in FIELDS}


def text(note: str | None) -> str | None:
    """A readable note: free text as stored; a structured one as labelled lines."""
    handoff = fields(note)
    if handoff is None:
        return note
    return "\n".join(f"{_LABELS[name]}: {value}" for name, value in handoff.items() if value)
