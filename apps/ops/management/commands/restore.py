import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from apps.ops.backup import BackupError, restore


class Command(BaseCommand):
    help = (
        "Restore an archive written by backup into an empty deployment (no orgs or users in the database, "
        "no data keys in the key store), with the master key the backup was taken under. Checks every "
        "checksum first; a refusal writes nothing and exits 1."
    )

    def add_arguments(self, parser):
        parser.add_argument("archive", help="The archive written by manage.py backup.")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        try:
            done = restore(Path(o["archive"]))
        except BackupError as exc:
            if o["json"]:
                self.stdout.write(json.dumps({"ok": False, "message": str(exc)}))
            self.stderr.write(str(exc))
            sys.exit(1)
        manifest = done["manifest"]
        if o["json"]:
            self.stdout.write(
                json.dumps({"ok": True, "orgs": done["orgs"], "keys": done["keys"], "createdAt": manifest["createdAt"]})
            )
            return
        self.stdout.write(
            f"restored {done['orgs']} org(s) and {done['keys']} data key(s) from the backup of {manifest['createdAt']}; "
            "run manage.py verify_chain to check every receipt."
        )
