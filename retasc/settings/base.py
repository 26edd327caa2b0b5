"""Retasc settings: one module, configured from the environment.

All variables are optional; the defaults give the embedded mode (SQLite in the data
directory, in-memory channel layer, background jobs inside the server process).
"""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from apps.core.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    sqlite_database,
)
from apps.core.logs import logging_config
from retasc import __version__
from retasc.secrets import generated_secret

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VERSION = __version__

DATA_DIR = Path(env_str("RETASC_DATA_DIR", str(BASE_DIR / "var"))).resolve()

DEBUG = env_bool("RETASC_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY") or generated_secret(DATA_DIR, "secret_key", what="Django secret key")

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
# Proxies whose X-Forwarded-For (and X-Forwarded-Proto) are believed: addresses or
# networks, comma-separated. Empty (the default): forwarded headers are ignored.
from apps.core.clientip import parse_proxies  # noqa: E402

RETASC_TRUSTED_PROXIES = parse_proxies(env_list("RETASC_TRUSTED_PROXIES", []))
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
    "apps.work",
    "apps.tools",
    "apps.accounts",
    "apps.dash",
    "django_htmx",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "apps.api",
    "apps.mcp",
    "apps.devices",
    "apps.intake",
    "apps.notifications",
    "apps.hooks",
    "apps.ops",
]

MIDDLEWARE = [
    "apps.core.clientip.UntrustedForwardedHeaders",  # first: forwarded headers only from our proxies
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.dash.csp.ContentSecurityPolicyMiddleware",
]
# /api/v1/ requests that carry an Authorization header (agent keys, personal tokens) and
# no session cookie run
# only these (apps.core.handler): the key decides who is calling, so sessions, CSRF,
# locale, messages, allauth, htmx, CSP and static files have nothing to do for them.
# The same classes, in the same order as above; the response headers stay the same.
RETASC_API_KEY_MIDDLEWARE = [
    "apps.core.clientip.UntrustedForwardedHeaders",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# --- HTTPS: on when the public URL is https (`manage.py check --deploy` is then clean) --
# TLS usually ends at a proxy: it says so with X-Forwarded-Proto, believed only from
# RETASC_TRUSTED_PROXIES (apps.core.clientip.UntrustedForwardedHeaders strips it from
# anyone else). Without a trusted proxy, run Daphne with TLS itself.
HTTPS = PUBLIC_URL.startswith("https://")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("RETASC_SSL_REDIRECT", HTTPS)
SECURE_REDIRECT_EXEMPT = [r"^api/health$"]  # health checks probe the process over plain HTTP
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("RETASC_HSTS_SECONDS", 31536000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("RETASC_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("RETASC_HSTS_PRELOAD", HTTPS)

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
                "django.template.context_processors.i18n",
                "apps.dash.context.dash",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)  # and tightened at start-up (apps.core.datadir)
    DATABASES = {"default": sqlite_database(DATA_DIR / "retasc.sqlite3")}

# PostgreSQL: one bounded connection pool per server process. Requests borrow a
# connection and give it back when they end, so a busy server neither pays a new
# connection (a backend process) per request nor opens more than this many; requests
# beyond it wait their turn, and after RETASC_DB_POOL_TIMEOUT seconds answer 503
# UNAVAILABLE. 0 turns pooling off (a connection per request). Size it so that
# processes x RETASC_DB_POOL_SIZE stays under the server's max_connections.
DB_POOL_SIZE = env_int("RETASC_DB_POOL_SIZE", 20, minimum=0, maximum=1000)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_POOL_SIZE:
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": min(2, DB_POOL_SIZE),
        "max_size": DB_POOL_SIZE,
        "timeout": env_int("RETASC_DB_POOL_TIMEOUT", 30, minimum=1, maximum=600),
    }
    # A pooled connection is checked before it is handed out: after a database restart
    # the pool replaces dead connections instead of failing a request with one.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# PostgreSQL: statements are sent with their parameters apart (server-side binding), and
# one a connection has run five times is prepared, so the database parses and plans it
# once per connection instead of every time. A claim + finish costs the database about
# a third of the CPU it costs with client-side binding (docs/benchmarks.md). Set
# RETASC_DB_PREPARED=false behind a pooler in transaction mode that cannot keep prepared
# statements (PgBouncer before 1.21), which also goes back to client-side binding.
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool("RETASC_DB_PREPARED", True):
    DATABASES["default"]["ENGINE"] = "apps.core.postgresql"  # batches within the protocol's 65,535 parameters
    DATABASES["default"]["OPTIONS"]["server_side_binding"] = True
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"REDIS_URL must start with redis:// or rediss://, not {REDIS_URL!r}.")
if REDIS_URL:
    # Shared by every server process: API rate limits hold across the load balancer.
    CACHES = {
        "default": {
            "BACKEND": "apps.core.cache.SharedRedisCache",  # one pool per process (apps.core.cache)
            "LOCATION": REDIS_URL,
            # Short timeouts: a Redis outage degrades rate limits, never hangs requests.
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }

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
# Workers log through LOGGING (RETASC_LOG_FORMAT, request ids, masking), not Celery's own
# format; stdout/stderr stay the process's (a redirect would loop LOGGING's handler into itself).
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_REDIRECT_STDOUTS = False
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
# WhiteNoise serves static files from Daphne; finders make it work before collectstatic.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "apps.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["apps.api.parsers.BoundedJSONParser"],
}
# Per agent key (or signed-in user) request rate for /api/v1/, e.g. "600/min".
RETASC_API_RATE = env_str("RETASC_API_RATE", "600/min")
if not __import__("re").fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", RETASC_API_RATE):
    raise ImproperlyConfigured(f"RETASC_API_RATE must look like 600/min, not {RETASC_API_RATE!r}.")
RETASC_UPLOAD_MAX_BYTES = env_int("RETASC_UPLOAD_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
# Every request body is capped before the app reads it (apps.core.bodycap, in front of the
# whole ASGI app): Content-Length first, then the bytes as they stream. The default fits
# the largest legal JSON body (a 200000-character title and body, escaped) with room.
# Uploads (PUT /api/v1/uploads/...) have their own cap, RETASC_UPLOAD_MAX_BYTES.
RETASC_MAX_BODY_BYTES = env_int("RETASC_MAX_BODY_BYTES", 2 * 1024 * 1024, minimum=64 * 1024)
RETASC_UPLOAD_URL_TTL_SECONDS = env_int("RETASC_UPLOAD_URL_TTL_SECONDS", 900, minimum=10, maximum=7 * 24 * 3600)
SPECTACULAR_SETTINGS = {
    "TITLE": "Retasc API",
    "DESCRIPTION": "Agent-first issue tracker and work queue. Same operations and error codes as the MCP tools.",
    "VERSION": __version__,
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "OAS_VERSION": "3.1.0",
    "PREPROCESSING_HOOKS": ["apps.api.schema.only_api_v1"],
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "apps.api.schema.add_components"],
}

# Queue behaviour.
RETASC_LEASE_TTL_SECONDS = env_int("RETASC_LEASE_TTL_SECONDS", 1800, minimum=5, maximum=7 * 24 * 3600)
RETASC_CLAIM_CAP = env_int("RETASC_CLAIM_CAP", 7, minimum=1, maximum=1000)
# Live session keys one agent key may have (mint_session_key refuses past it).
RETASC_SESSION_KEYS_MAX = env_int("RETASC_SESSION_KEYS_MAX", 16, minimum=1, maximum=1000)
# The Dash re-checks a chain from its last verified head; a whole walk at least this often.
RETASC_CHAIN_RECHECK_SECONDS = env_int("RETASC_CHAIN_RECHECK_SECONDS", 600, minimum=0)
RETASC_RECLAIM_INTERVAL_SECONDS = env_int("RETASC_RECLAIM_INTERVAL_SECONDS", 30, minimum=1)
# How long `retasc login` waits between polls of the device flow.
RETASC_DEVICE_POLL_INTERVAL_SECONDS = env_int("RETASC_DEVICE_POLL_INTERVAL_SECONDS", 5, minimum=1, maximum=60)

# Self-serve org creation (CLI, API): at most this many new orgs per person per hour.
RETASC_ORG_CREATE_PER_HOUR = env_int("RETASC_ORG_CREATE_PER_HOUR", 5, minimum=1, maximum=1000)

# Billing: meter always; enforce only when asked (hosted). Embedded default: meter only.
RETASC_BILLING_ENFORCE = env_bool("RETASC_BILLING_ENFORCE", False)
# Card top-ups through Stripe Checkout (apps.billing.stripe_api), on only with a secret
# key; the webhook (POST /hooks/stripe) only with its endpoint secret. The API base is
# overridable so tests talk to a fake on the loopback.
RETASC_STRIPE_SECRET_KEY = env_str("RETASC_STRIPE_SECRET_KEY")
RETASC_STRIPE_WEBHOOK_SECRET = env_str("RETASC_STRIPE_WEBHOOK_SECRET")
RETASC_STRIPE_API_URL = env_str("RETASC_STRIPE_API_URL", "https://api.stripe.com").rstrip("/")
if not RETASC_STRIPE_API_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"RETASC_STRIPE_API_URL must be an http:// or https:// URL, not {RETASC_STRIPE_API_URL!r}.")

# Notifications (apps.notifications). Base URLs of the chat providers' APIs: proxies, tests.
RETASC_SLACK_API_URL = env_str("RETASC_SLACK_API_URL", "https://slack.com/api/").rstrip("/") + "/"
RETASC_DISCORD_API_URL = env_str("RETASC_DISCORD_API_URL", "https://discord.com/api/v10").rstrip("/")
RETASC_TELEGRAM_API_URL = env_str("RETASC_TELEGRAM_API_URL", "https://api.telegram.org").rstrip("/")
RETASC_LINEAR_API_URL = env_str("RETASC_LINEAR_API_URL", "https://api.linear.app/graphql")
# Outgoing webhooks never go to loopback or private addresses unless this is on.
RETASC_WEBHOOK_ALLOW_PRIVATE = env_bool("RETASC_WEBHOOK_ALLOW_PRIVATE", False)
# How often the delivery worker looks for due messages (it is also woken after commit).
RETASC_NOTIFY_INTERVAL_SECONDS = env_int("RETASC_NOTIFY_INTERVAL_SECONDS", 5, minimum=1, maximum=3600)
# A worker holds a delivery this long; if it dies mid-send, the delivery is sent again after.
RETASC_NOTIFY_LEASE_SECONDS = env_int("RETASC_NOTIFY_LEASE_SECONDS", 120, minimum=1, maximum=3600)
RETASC_NOTIFY_TIMEOUT_SECONDS = env_int("RETASC_NOTIFY_TIMEOUT_SECONDS", 10, minimum=1, maximum=120)

# MCP at /mcp (apps.mcp). Largest accepted request body; larger ones get HTTP 413.
# (The ASGI cap, RETASC_MAX_BODY_BYTES, applies first and answers in JSON; this one is
# the MCP SDK's own, kept at the same size by default.)
RETASC_MCP_MAX_BODY_BYTES = env_int("RETASC_MCP_MAX_BODY_BYTES", RETASC_MAX_BODY_BYTES, minimum=64 * 1024)
# Test instances only: answer initialize / ping / tools/list without a key (every tool
# call still needs one). Lets key-less protocol checkers (MCP conformance) run.
RETASC_MCP_ANONYMOUS_DISCOVERY = env_bool("RETASC_MCP_ANONYMOUS_DISCOVERY", False)
# Handshake-era POSTs to the stateless /mcp answered one exchange each through the SDK's
# handler kernel (apps.mcp.exchange); false sends them through the SDK's per-request
# transport instead (the same answers, at more CPU per request: docs/benchmarks.md).
RETASC_MCP_SINGLE_EXCHANGE = env_bool("RETASC_MCP_SINGLE_EXCHANGE", True)
# MCP authorization (OAuth 2.1) for clients that cannot paste a bearer key. OAuth needs an
# https public URL (or a loopback one); on a plain-http public host it stays off.
RETASC_MCP_OAUTH = env_bool("RETASC_MCP_OAUTH", True)

# Intake (apps.intake, apps.hooks): webhook bodies above this are refused (413) before
# they are read; writeback retries back off exponentially from the base, up to the cap.
RETASC_HOOK_MAX_BODY_BYTES = env_int("RETASC_HOOK_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
RETASC_WRITEBACK_BACKOFF_SECONDS = env_int("RETASC_WRITEBACK_BACKOFF_SECONDS", 30, minimum=0)
RETASC_WRITEBACK_BACKOFF_MAX_SECONDS = env_int("RETASC_WRITEBACK_BACKOFF_MAX_SECONDS", 3600, minimum=1)
RETASC_WRITEBACK_MAX_ATTEMPTS = env_int("RETASC_WRITEBACK_MAX_ATTEMPTS", 12, minimum=1)

# Logs: one line per record with the request id; "json" for JSON lines. Credentials are
# masked in every line (apps.core.logs).
RETASC_LOG_FORMAT = env_str("RETASC_LOG_FORMAT", "text").lower()
if RETASC_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"RETASC_LOG_FORMAT must be text or json, not {RETASC_LOG_FORMAT!r}.")
LOGGING = logging_config(fmt=RETASC_LOG_FORMAT, level=env_str("RETASC_LOG_LEVEL", "INFO").upper())

# /metrics (apps.ops): with a token, only "Authorization: Bearer <token>"; without one,
# only direct loopback clients (a request that came through a proxy never counts).
RETASC_METRICS_TOKEN = env_str("RETASC_METRICS_TOKEN")

# --- Accounts: django-allauth (e-mail sign-in; GitHub/Google when configured) ---------
from apps.accounts import config as _accounts  # noqa: E402

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "dash:home"
ACCOUNT_LOGOUT_REDIRECT_URL = "account_login"
ACCOUNT_ADAPTER = "apps.accounts.adapter.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "apps.accounts.adapter.SocialAccountAdapter"
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_PRESERVE_USERNAME_CASING = False
ACCOUNT_EMAIL_VERIFICATION = _accounts.email_verification()
ACCOUNT_SESSION_REMEMBER = None
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "https" if PUBLIC_URL.startswith("https") else "http"
# Sign-in throttling (allauth counts in the cache): failed logins per IP and per account.
ACCOUNT_RATE_LIMITS = {
    "login": "30/m/ip",
    "login_failed": "10/m/ip,5/5m/key",
    "signup": "20/m/ip",
    "reset_password": "20/m/ip,5/m/key",
    "confirm_email": "1/3m/key",
}
_social_apps, SOCIALACCOUNT_PROVIDERS = _accounts.social_providers()
INSTALLED_APPS += _social_apps
SOCIALACCOUNT_EMAIL_AUTHENTICATION = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True
for _name, _value in _accounts.email_settings().items():
    globals()[_name] = _value
