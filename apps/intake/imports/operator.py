"""What the operator commands (manage.py import_linear / import_file) share: the org's
first active owner acts (receipts name them, runtime ``import``), the job runs to the
end in this process, and the answer is the job's shape."""

from __future__ import annotations

from django.core.management.base import CommandError

from apps.intake.imports.services import import_run, import_shape, import_start
from apps.orgs.actor import Actor
from apps.orgs.models import Membership, Org


def owner_actor(slug: str) -> Actor:
    org = Org.objects.filter(slug=slug, deleted_at__isnull=True).first()
    if org is None:
        raise CommandError(f"There is no org {slug!r}.")
    owner = (
        Membership.objects.filter(org=org, role=Membership.Role.OWNER, status=Membership.Status.ACTIVE)
        .select_related("user")
        .order_by("created_at", "pk")
        .first()
    )
    if owner is None:
        raise CommandError(f"The org {org.slug!r} has no active owner to act for.")
    return Actor(org=org, principal_id=owner.user_id, key=None, runtime="import", membership=owner)


def run_import(*, actor: Actor, source: str, api_key=None, teams=None, upload=None, filename=None) -> dict:
    job = import_start(actor=actor, source=source, api_key=api_key, teams=teams, upload=upload, filename=filename, launch=False)
    job = import_run(job.pk, api_key=api_key)
    shape = import_shape(job)
    if job.status != "done":
        raise CommandError(shape["summary"] or "The import failed.")
    return shape


def human(shape: dict) -> str:
    lines = [f"import {shape['importId']} ({shape['source']}): {shape['status']}", shape["summary"] or ""]
    for err in shape["errors"][:20]:
        lines.append(f"  {err['record']}: {err['message']}")
    return "\n".join(line for line in lines if line)
