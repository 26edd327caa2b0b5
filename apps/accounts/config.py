"""Settings fragments for sign-in and e-mail, read from the environment.

Imported by ``retasc.settings.base``; nothing here touches the database or the app
registry. Each integration is switched on by one variable (STYLE.md §8).
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from apps.core.env import env_bool, env_int, env_str

EMAIL_VERIFICATION_CHOICES = ("none", "optional", "mandatory")


def email_verification() -> str:
    value = env_str("RETASC_EMAIL_VERIFICATION", "optional").lower()
    if value not in EMAIL_VERIFICATION_CHOICES:
        raise ImproperlyConfigured(f"RETASC_EMAIL_VERIFICATION must be none, optional or mandatory, not {value!r}.")
    return value


def email_settings() -> dict:
    """Django's EMAIL_* settings: SMTP from EMAIL_URL (or EMAIL_HOST), else the console.

    ``EMAIL_URL`` looks like ``smtp://user:password@host:587?tls=true`` (``smtps://`` for
    implicit TLS). Without it (and without ``EMAIL_HOST``) mail is printed to the console,
    which is what the embedded mode wants.
    """
    url = env_str("EMAIL_URL")
    out: dict = {"DEFAULT_FROM_EMAIL": env_str("RETASC_EMAIL_FROM", "Retasc <noreply@localhost>")}
    if url:
        parsed = urlparse(url)
        if parsed.scheme not in ("smtp", "smtps", "submission"):
            raise ImproperlyConfigured(f"EMAIL_URL must start with smtp:// or smtps://, not {parsed.scheme or url!r}.")
        if not parsed.hostname:
            raise ImproperlyConfigured("EMAIL_URL must name a host, e.g. smtp://user:pass@mail.example.com:587.")
        query = {k: v[-1].lower() for k, v in parse_qs(parsed.query).items()}
        ssl = parsed.scheme == "smtps" or query.get("ssl") in ("1", "true", "yes")
        out.update(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST=parsed.hostname,
            EMAIL_PORT=parsed.port or (465 if ssl else 587),
            EMAIL_HOST_USER=unquote(parsed.username or ""),
            EMAIL_HOST_PASSWORD=unquote(parsed.password or ""),
            EMAIL_USE_SSL=ssl,
            EMAIL_USE_TLS=not ssl and query.get("tls", "true") in ("1", "true", "yes"),
        )
        return out
    host = env_str("EMAIL_HOST")
    if host:
        out.update(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST=host,
            EMAIL_PORT=env_int("EMAIL_PORT", 587, minimum=1, maximum=65535),
            EMAIL_HOST_USER=env_str("EMAIL_HOST_USER"),
            EMAIL_HOST_PASSWORD=env_str("EMAIL_HOST_PASSWORD"),
            EMAIL_USE_TLS=env_bool("EMAIL_USE_TLS", True),
            EMAIL_USE_SSL=env_bool("EMAIL_USE_SSL", False),
        )
        return out
    out["EMAIL_BACKEND"] = "django.core.mail.backends.console.EmailBackend"
    return out


def social_providers() -> tuple[list[str], dict]:
    """(provider apps to install, SOCIALACCOUNT_PROVIDERS) for the configured providers.

    GitHub is on when GITHUB_CLIENT_ID and GITHUB_CLIENT_SECRET are set; Google when
    GOOGLE_CLIENT_ID and GOOGLE_CLIENT_SECRET are set (each accepts a ``*_FILE`` variant).
    """
    apps: list[str] = []
    providers: dict = {}
    for name, scope in (("github", ["read:user", "user:email"]), ("google", ["profile", "email"])):
        upper = name.upper()
        client_id = env_str(f"{upper}_CLIENT_ID")
        secret = env_str(f"{upper}_CLIENT_SECRET")
        if not client_id and not secret:
            continue
        if not client_id or not secret:
            raise ImproperlyConfigured(f"{upper}_CLIENT_ID and {upper}_CLIENT_SECRET must be set together.")
        apps.append(f"allauth.socialaccount.providers.{name}")
        providers[name] = {"APPS": [{"client_id": client_id, "secret": secret, "key": ""}], "SCOPE": scope}
        if name == "google":
            providers[name]["AUTH_PARAMS"] = {"access_type": "online"}
    return apps, providers
