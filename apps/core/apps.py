from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self):
        # Every entry point (manage.py, daphne, celery) sets Django up, so this is where a
        # wrong master key stops start-up: before anything writes content it could not
        # read back. No database access: the canary lives in the key store. Imported in
        # ready(), once settings are loaded (the key store reads them at import).
        from apps.core.keystore import check_master_key

        check_master_key()
