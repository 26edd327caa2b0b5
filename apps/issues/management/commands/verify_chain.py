import json
import sys

from django.core.management.base import BaseCommand

from apps.issues.chain import verify_folds, verify_org
from apps.orgs.models import Org


class Command(BaseCommand):
    help = (
        "Verify every org's receipt chain; exit 1 naming the first broken link. With --fold, "
        "also rebuild each issue from its receipts and report issues whose row drifted."
    )

    def add_arguments(self, parser):
        parser.add_argument("--org", help="Only this org (slug).")
        parser.add_argument(
            "--fold",
            action="store_true",
            help="Also fold each issue's receipts and compare with the issue row (decrypts; slower).",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        orgs = Org.objects.filter(deleted_at__isnull=True).order_by("slug")
        if o["org"]:
            orgs = orgs.filter(slug=o["org"])
            if not orgs.exists():
                self.stderr.write(f"There is no org {o['org']!r}.")
                sys.exit(2)
        breaks, drifts, checked = [], [], 0
        for org in orgs:
            checked += 1
            problem = verify_org(org)
            if problem:
                breaks.append(problem)
                break
            if o["fold"]:
                drifts.extend(verify_folds(org))
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "ok": not breaks and not drifts,
                        "orgs": checked,
                        "broken": [b.__dict__ for b in breaks],
                        "drifted": [d.__dict__ for d in drifts],
                    }
                )
            )
        else:
            for problem in [*breaks, *drifts]:
                self.stderr.write(str(problem))
            if not breaks and not drifts:
                folded = " and every issue matches its receipts" if o["fold"] else ""
                self.stdout.write(f"chain intact ({checked} org(s)){folded}")
        if breaks or drifts:
            sys.exit(1)
