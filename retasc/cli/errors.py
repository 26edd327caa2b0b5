"""Exit codes scripts can rely on, and the one error type every command raises."""

from __future__ import annotations

OK = 0
REFUSED = 1  # the server refused (a 4xx with a code), or a check failed
USAGE = 2  # bad arguments (Typer's own)
AUTH = 3  # not signed in, or the token / key is no longer valid
UNREACHABLE = 4  # the server cannot be reached or answered 5xx
LOCAL = 5  # local state is in the way (already bound, not bound, unreadable file)


class CliError(Exception):
    """One sentence for a human, an exit code for a script, the server's code if any."""

    def __init__(self, message: str, *, exit_code: int = REFUSED, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.code = code
