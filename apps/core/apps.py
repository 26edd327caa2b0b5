from django.apps import AppConfig
from django.conf import settings

from apps.core.datadir import secure_data_dir


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
        secure_storage()


def secure_storage() -> None:
    """The data directory 0700 and the SQLite files 0600, before the first connection."""
    db = settings.DATABASES["default"]
    sqlite = None
    if db["ENGINE"] == "django.db.backends.sqlite3" and db["NAME"] not in ("", ":memory:"):
        sqlite = db["NAME"]
        if "mode=memory" in str(sqlite):
            sqlite = None
    secure_data_dir(settings.DATA_DIR, sqlite)
