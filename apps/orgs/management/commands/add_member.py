from django.core.management.base import CommandError

from apps.core.commands import RetascCommand
from apps.orgs.models import Org
from apps.orgs.services import member_add, user_get_or_create


class Command(RetascCommand):
    help = "Add a person to an org (creating their account if needed)."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org slug.")
        parser.add_argument("--email", required=True)
        parser.add_argument("--role", default="member", choices=["owner", "member"])

    def run(self, **o):
        org = Org.objects.filter(slug=o["org"], deleted_at__isnull=True).first()
        if org is None:
            raise CommandError(f"There is no org {o['org']!r}.")
        user, _ = user_get_or_create(email=o["email"])
        membership = member_add(org=org, user=user, role=o["role"])
        return {"org": org.slug, "email": user.email, "role": membership.role, "memberId": membership.pk}
