"""Daphne's access log, made safe.

Daphne writes an NCSA line per request with the raw path to stdout (by default, at
verbosity 1). Raw paths hold capability secrets (``/invite/<code>/``, upload URLs), so
``retasc.asgi`` swaps Daphne's writer for ``MaskedAccessLog`` before Daphne builds its
server (Daphne imports the application first): text logs keep the NCSA line with
credentials masked; JSON logs drop it, because ``retasc.request`` already writes one
JSON access line per request (URL pattern, status, time, request id).
"""

from __future__ import annotations

import sys

from daphne.access import AccessLogGenerator
from django.conf import settings

from apps.core.redact import redact


class MaskedAccessLog(AccessLogGenerator):
    def write_entry(self, host, date, request, status=None, length=None, ident=None, user=None):
        if settings.RETASC_LOG_FORMAT == "json":
            return
        super().write_entry(host, date, redact(request), status=status, length=length, ident=ident, user=user)


def install_masked_access_log() -> bool:
    """Under the ``daphne`` command, make its access log ``MaskedAccessLog``."""
    cli = sys.modules.get("daphne.cli")
    if cli is None:
        return False
    cli.AccessLogGenerator = MaskedAccessLog
    return True
