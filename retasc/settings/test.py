"""Test settings: the base settings with fast hashing and no generated files in the tree."""

import os
import tempfile

os.environ.setdefault("RETASC_DATA_DIR", os.path.join(tempfile.gettempdir(), f"retasc-test-{os.getuid()}"))
# Fixed, test-only secrets: tests never generate or print keys.
os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-not-secret")
os.environ.setdefault("RETASC_MASTER_KEY", "dGVzdC1vbmx5LW1hc3Rlci1rZXktMzItYnl0ZXMhISE=")

from retasc.settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
RETASC_INPROCESS_JOBS = False
RETASC_WEBHOOK_ALLOW_PRIVATE = True  # the fake receivers listen on 127.0.0.1
LOGGING["root"]["level"] = "WARNING"  # noqa: F405
