import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from apps.ops.backup import BackupError, backup


class Command(BaseCommand):
    help = (
        "Write one archive with the database, the key store (data keys, still wrapped) and the chain heads. "
        "The master key is not in it: keep it apart."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="The archive to create (never overwritten).")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        out = Path(o["out"])
        try:
            manifest = backup(out)
        except BackupError as exc:
            self.stderr.write(str(exc))
            sys.exit(1)
        keys = sum(1 for name in manifest["members"] if name.endswith(".key"))
        if o["json"]:
            summary = {k: manifest[k] for k in ("createdAt", "retasc", "django", "database", "orgs")}
            self.stdout.write(json.dumps({"ok": True, "archive": str(out), "keys": keys, **summary}))
            return
        db = manifest["database"]
        self.stdout.write(
            f"backup written to {out}: {manifest['orgs']} org(s), {keys} data key(s), {db['engine']} {db['version']}. "
            "The master key is not in it: keep it apart."
        )
