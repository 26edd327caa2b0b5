import os

from django.core.management.base import CommandError

from apps.core.commands import RetascCommand
from apps.intake.imports.operator import human, owner_actor, run_import


class Command(RetascCommand):
    help = "Import Linear teams into an org (key read from an environment variable, never an argument); prints the summary."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org slug.")
        parser.add_argument(
            "--api-key-env", required=True, metavar="VAR", help="The environment variable holding the Linear API key."
        )
        parser.add_argument("--team", action="append", default=[], help="A Linear team key (repeatable; default: every team).")

    def run(self, **o):
        key = os.environ.get(o["api_key_env"], "").strip()
        if not key:
            raise CommandError(f"The environment variable {o['api_key_env']} holds no Linear API key.")
        return run_import(actor=owner_actor(o["org"]), source="linear", api_key=key, teams=o["team"] or None)

    def human(self, result: dict) -> str:
        return human(result)
