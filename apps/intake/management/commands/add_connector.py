from pathlib import Path

from django.core.management.base import CommandError

from apps.core.commands import RetascCommand
from apps.intake.connectors import connector_create
from apps.orgs.actor import Actor
from apps.orgs.models import Membership, Org


class Command(RetascCommand):
    help = "Connect a GitHub/GitLab repository to a project; prints {connectorId, webhookUrl, secret} (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org slug.")
        parser.add_argument("--project", required=True, help="Project prefix the issues land in.")
        parser.add_argument("--provider", required=True, choices=["github", "gitlab"])
        parser.add_argument("--repo", required=True, help="OWNER/NAME (GitLab: the project's full path).")
        parser.add_argument("--token-file", help="A file holding the provider token writeback uses.")
        parser.add_argument("--api-url", help="The provider's API base URL (self-hosted GitLab, GitHub Enterprise).")
        parser.add_argument("--pr-sync", action="store_true", help="A merged PR naming an issue marks it done.")

    def run(self, **o):
        org = Org.objects.filter(slug=o["org"], deleted_at__isnull=True).first()
        if org is None:
            raise CommandError(f"There is no org {o['org']!r}.")
        owner = (
            Membership.objects.filter(org=org, role=Membership.Role.OWNER, status=Membership.Status.ACTIVE)
            .order_by("created_at", "pk")
            .first()
        )
        if owner is None:
            raise CommandError(f"The org {org.slug!r} has no active owner to act for.")
        token = None
        if o["token_file"]:
            try:
                token = Path(o["token_file"]).read_text().strip()
            except OSError as exc:
                raise CommandError(f"Cannot read --token-file {o['token_file']!r} ({exc.strerror}).") from None
        # The operator acts as the org's first active owner (the receipt says runtime "system").
        actor = Actor(org=org, principal_id=owner.user_id, key=None, runtime="system", membership=owner)
        return connector_create(
            actor=actor,
            provider=o["provider"],
            project=o["project"],
            repo=o["repo"],
            token=token,
            api_url=o["api_url"],
            pr_sync=o["pr_sync"],
        )
