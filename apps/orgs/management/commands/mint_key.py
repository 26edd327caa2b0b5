from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from apps.core.commands import RetascCommand
from apps.orgs.models import Org, Project
from apps.orgs.services import agent_key_mint


class Command(RetascCommand):
    help = "Mint an agent key for a member (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org slug.")
        parser.add_argument("--email", required=True, help="The member the key acts for.")
        parser.add_argument("--project", help="Default project prefix (default: the org's first).")
        parser.add_argument("--runtime", default="claude-code")
        parser.add_argument("--label", default="")

    def run(self, **o):
        org = Org.objects.filter(slug=o["org"], deleted_at__isnull=True).first()
        if org is None:
            raise CommandError(f"There is no org {o['org']!r}.")
        user = get_user_model().objects.filter(email__iexact=o["email"]).first()
        if user is None:
            raise CommandError(f"There is no person {o['email']!r}.")
        projects = Project.objects.filter(org=org)
        project = (
            projects.filter(prefix=o["project"].upper()).first() if o["project"] else projects.order_by("created_at").first()
        )
        if project is None:
            raise CommandError("That project does not exist in the org.")
        _, raw = agent_key_mint(org=org, user=user, project=project, runtime=o["runtime"], label=o["label"])
        return {"agentKey": raw}
