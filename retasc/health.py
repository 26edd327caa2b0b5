from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from retasc import __version__


def health(request):
    """Unauthenticated liveness: checks the database and, when configured, Redis."""
    checks = {}
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception:
        checks["database"] = "unavailable"
    if settings.REDIS_URL:
        try:
            import redis  # deferred: only when Redis is configured (the embedded mode has none)

            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2).ping()
            checks["redis"] = "ok"
        except Exception:
            checks["redis"] = "unavailable"
    ok = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ok" if ok else "unavailable", "version": __version__, "checks": checks}, status=200 if ok else 503
    )
