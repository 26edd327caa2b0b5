"""Retasc settings: one module, configured from the environment.

All variables are optional; the defaults give the embedded mode (SQLite in the data
directory, in-memory channel layer, background jobs inside the server process).
"""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from retasc import __version__
from retasc.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    sqlite_database,
)
from retasc.secrets import generated_secret

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VERSION = __version__

DATA_DIR = Path(env_str("RETASC_DATA_DIR", str(BASE_DIR / "var"))).resolve()

DEBUG = env_bool("RETASC_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY") or generated_secret(
    DATA_DIR, "secret_key", what="Django secret key"
)

# The master key ring: comma-separated base64 keys, newest first. The newest wraps new
# org data keys; every key in the ring can unwrap.
RETASC_MASTER_KEY = env_str("RETASC_MASTER_KEY")
if not RETASC_MASTER_KEY:
    from apps.core.crypto import new_master_key

    RETASC_MASTER_KEY = generated_secret(
        DATA_DIR, "master_key", what="master key (it protects every org's content)", make=new_master_key
    )
else:
    from apps.core.crypto import MasterKeyRing

    MasterKeyRing.parse(RETASC_MASTER_KEY)  # a bad value stops start-up here

PUBLIC_URL = env_str("RETASC_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
ALLOWED_HOSTS = env_list("RETASC_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = [PUBLIC_URL]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "apps.core",
    "apps.orgs",
    "apps.issues",
    "apps.leases",
    "apps.billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "retasc.urls"
ASGI_APPLICATION = "retasc.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": sqlite_database(DATA_DIR / "retasc.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"REDIS_URL must start with redis:// or rediss://, not {REDIS_URL!r}.")

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Background jobs: Celery (broker = Redis) when REDIS_URL is set, else in-process.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TIMEZONE = "UTC"
RETASC_INPROCESS_JOBS = env_bool("RETASC_INPROCESS_JOBS", not REDIS_URL)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
}

# Queue behaviour.
RETASC_LEASE_TTL_SECONDS = env_int("RETASC_LEASE_TTL_SECONDS", 1800, minimum=5, maximum=7 * 24 * 3600)
RETASC_CLAIM_CAP = env_int("RETASC_CLAIM_CAP", 7, minimum=1, maximum=1000)
RETASC_RECLAIM_INTERVAL_SECONDS = env_int("RETASC_RECLAIM_INTERVAL_SECONDS", 30, minimum=1)

# Billing: meter always; enforce only when asked (hosted). Embedded default: meter only.
RETASC_BILLING_ENFORCE = env_bool("RETASC_BILLING_ENFORCE", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("RETASC_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
