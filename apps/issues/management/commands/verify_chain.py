import json
import sys

from django.core.management.base import BaseCommand

from apps.core.chain import verify_org
from apps.orgs.models import Org


class Command(BaseCommand):
    help = "Verify every org's receipt chain; exit 1 naming the first broken link."

    def add_arguments(self, parser):
        parser.add_argument("--org", help="Only this org (slug).")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        orgs = Org.objects.filter(deleted_at__isnull=True).order_by("slug")
        if o["org"]:
            orgs = orgs.filter(slug=o["org"])
            if not orgs.exists():
                self.stderr.write(f"There is no org {o['org']!r}.")
                sys.exit(2)
        breaks, checked = [], 0
        for org in orgs:
            checked += 1
            problem = verify_org(org)
            if problem:
                breaks.append(problem)
                break
        if o["json"]:
            self.stdout.write(json.dumps({"ok": not breaks, "orgs": checked, "broken": [b.__dict__ for b in breaks]}))
        elif breaks:
            self.stderr.write(str(breaks[0]))
        else:
            self.stdout.write(f"chain intact ({checked} org(s))")
        if breaks:
            sys.exit(1)
