from apps.core.commands import RetascCommand
from apps.core.errors import not_found
from apps.issues.search import search_rebuild
from apps.orgs.models import Org


class Command(RetascCommand):
    help = "Rebuild the keyed search index of every org (or one), e.g. after a data key changed."

    def add_arguments(self, parser):
        parser.add_argument("--org", help="Only this org (slug).")

    def run(self, **o):
        orgs = Org.objects.order_by("pk")
        if o["org"]:
            orgs = orgs.filter(slug=o["org"])
            if not orgs.exists():
                raise not_found(f"Org {o['org']}")
        return {"orgs": {org.slug: search_rebuild(org_id=org.pk) for org in orgs}}

    def human(self, r):
        return "\n".join(f"{slug}: {n} issues indexed" for slug, n in r["orgs"].items()) or "No orgs."
