"""A base for operator commands: --json output and one-sentence errors."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import ServiceError


class RetascCommand(BaseCommand):
    """Subclasses define ``run(**options) -> dict``; ``human(result)`` may format it."""

    json_flag = True

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        if self.json_flag:
            parser.add_argument("--json", action="store_true", help="Print one JSON object on stdout.")
        return parser

    def handle(self, *args, **options):
        try:
            result = self.run(**options)
        except ServiceError as exc:
            raise CommandError(f"{exc.message} ({exc.code})") from None
        if options.get("json"):
            self.stdout.write(json.dumps(result, sort_keys=True))
        else:
            self.stdout.write(self.human(result))

    def human(self, result: dict) -> str:
        return "\n".join(f"{k}: {v}" for k, v in result.items())
