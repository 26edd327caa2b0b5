from pathlib import Path

from django.core.management.base import CommandError

from apps.core.commands import RetascCommand
from apps.intake.imports.operator import human, owner_actor, run_import


def sniff(data: bytes) -> str:
    """A Retasc export is one JSON object with "format": "retasc-export"; else beads JSONL."""
    head = data.lstrip()[:4096]
    return "retasc" if head.startswith(b"{") and b'"retasc-export"' in head else "beads"


class Command(RetascCommand):
    help = "Import a Retasc JSON export or a beads issues.jsonl into an org; prints the summary."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org slug.")
        parser.add_argument("path", help="The file: a Retasc export (.json) or beads issues.jsonl.")
        parser.add_argument("--source", choices=["retasc", "beads"], help="Say which (default: from the content).")

    def run(self, **o):
        try:
            data = Path(o["path"]).read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {o['path']!r} ({exc.strerror}).") from None
        source = o["source"] or sniff(data)
        return run_import(actor=owner_actor(o["org"]), source=source, upload=data, filename=Path(o["path"]).name)

    def human(self, result: dict) -> str:
        return human(result)
