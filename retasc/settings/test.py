"""Test settings: the base settings with fast hashing and no generated files in the tree."""

import hashlib
import os
import tempfile
from pathlib import Path

# One data directory (SQLite test database, key store) per checkout: two checkouts testing
# at once on one machine must not share a database file.
_CHECKOUT = hashlib.sha256(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:10]
os.environ.setdefault("RETASC_DATA_DIR", os.path.join(tempfile.gettempdir(), f"retasc-test-{os.getuid()}-{_CHECKOUT}"))
# Fixed, test-only secrets: tests never generate or print keys.
os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-not-secret")
os.environ.setdefault("RETASC_MASTER_KEY", "dGVzdC1vbmx5LW1hc3Rlci1rZXktMzItYnl0ZXMhISE=")

from retasc.settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
RETASC_INPROCESS_JOBS = False
LOGGING["root"]["level"] = "WARNING"  # noqa: F405
