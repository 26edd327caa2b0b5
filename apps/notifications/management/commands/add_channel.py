from pathlib import Path

from django.core.management.base import CommandError

from apps.core.commands import RetascCommand
from apps.core.errors import ServiceError
from apps.notifications.services import channel_create, webhook_url
from apps.orgs.models import Membership, Org
from apps.orgs.services import actor_for_human


def _read(path: str | None, what: str) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise CommandError(f"The {what} file {path!r} cannot be read ({exc.strerror}).") from None


class Command(RetascCommand):
    help = "Add a notification channel (Slack, Discord or Telegram) to an org, as its first owner."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org slug.")
        parser.add_argument("--kind", required=True, choices=["slack", "discord", "telegram"])
        parser.add_argument("--token-file", required=True, help="A file holding the bot token (kept out of the shell history).")
        parser.add_argument("--signing-secret-file", help="Slack: a file holding the app's signing secret.")
        parser.add_argument("--public-key", help="Discord: the application's public key (hex).")

    def run(self, **o):
        org = Org.objects.filter(slug=o["org"], deleted_at__isnull=True).first()
        if org is None:
            raise CommandError(f"There is no org {o['org']!r}.")
        owner = (
            Membership.objects.filter(org=org, role=Membership.Role.OWNER, status=Membership.Status.ACTIVE)
            .select_related("user")
            .order_by("created_at")
            .first()
        )
        if owner is None:
            raise CommandError("The org has no active owner.")
        try:
            channel = channel_create(
                actor=actor_for_human(user=owner.user, org=org),
                kind=o["kind"],
                bot_token=_read(o["token_file"], "token"),
                signing_secret=_read(o["signing_secret_file"], "signing secret"),
                public_key=o["public_key"],
            )
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        return {"channelId": str(channel.pk), "webhookUrl": webhook_url(channel)}
