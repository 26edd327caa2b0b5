import json
import sys

from django.core.management.base import BaseCommand

from apps.core.errors import ServiceError
from apps.issues.chain import chain_relink
from apps.orgs.models import Org


class Command(BaseCommand):
    help = (
        "Re-link, once, every receipt chain written before the chain key (HMAC-SHA-256, SPEC §7), "
        "recording a chain_relinked receipt. Idempotent: run at every start (make run / serve do)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        done, refused = [], []
        for org in Org.objects.filter(chain_keyed=False, deleted_at__isnull=True).order_by("slug"):
            try:
                result = chain_relink(org=org)
            except ServiceError as exc:
                refused.append({"org": org.slug, "message": exc.message})
                continue
            if result:
                done.append(result)
        if o["json"]:
            self.stdout.write(json.dumps({"relinked": done, "refused": refused}))
        else:
            for r in done:
                self.stdout.write(f"org {r['org']}: {r['entries']} receipt(s) re-linked under the chain key")
            for r in refused:
                self.stderr.write(f"org {r['org']}: {r['message']}")
        if refused:
            sys.exit(1)
