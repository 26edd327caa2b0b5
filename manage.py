#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retasc.settings.base")
    # One-off commands need no connection pool; without one a wrong DATABASE_URL fails at
    # once instead of retrying for RETASC_DB_POOL_TIMEOUT seconds. Servers keep theirs.
    os.environ.setdefault("RETASC_DB_POOL_SIZE", "0")
    from django.core.exceptions import ImproperlyConfigured

    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad setting is one clear sentence, not a stack trace.
        print(f"retasc: configuration error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
