from django.apps import AppConfig

from apps.core import unit


class WorkConfig(AppConfig):
    """The unit of work: writes the receipts, the ledger and the ranks of every mutation."""

    name = "apps.work"
    label = "work"

    def ready(self):
        # Imported in ready(): the writer imports models, which Django allows only once
        # the app registry is populated.
        from apps.work.writer import WRITER

        unit.install(WRITER)
