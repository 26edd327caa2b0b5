"""The one error type services raise. Every interface renders it the same way."""

from __future__ import annotations

# HTTP status per code; MCP carries the same code in the tool error's JSON.
HTTP_STATUS = {
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "GONE": 410,
    "INVALID_ARGUMENT": 400,
    "INVALID": 400,
    "CYCLE": 409,
    "CONFLICT": 409,
    "NOT_WORK": 409,
    "NOT_ELIGIBLE": 409,
    "BLOCKED": 409,
    "HELD": 409,
    "AWAITING_TRIAGE": 409,
    "AUTHOR_CANNOT_REVIEW": 403,
    "CLAIM_CAP": 429,
    "SESSION_KEY_CAP": 429,
    "CLAIM_REQUIRED": 409,
    "CLAIM_LOST": 409,
    "CLAIM_MISMATCH": 403,
    "ACCEPTANCE_EVIDENCE_REQUIRED": 422,
    "REVIEWER_REQUIRED": 422,
    "HANDOFF_REQUIRED": 422,
    "REVIEW_COMMENT_REQUIRED": 422,
    "BILLING_INACTIVE": 402,
    "MONTHLY_CAP_REACHED": 402,
    "RATE_LIMITED": 429,
    "TOO_LARGE": 413,
    "UNAVAILABLE": 503,
}


class ServiceError(Exception):
    """A refusal with a stable code, a one-sentence message and structured details.

    ``code`` may carry a suffix after a colon (``NOT_ELIGIBLE:done``); the HTTP status is
    chosen by the part before it.
    """

    def __init__(self, code: str, message: str, *, tell_human: str | None = None, ask_human: str | None = None, **details):
        super().__init__(message)
        self.code = code
        self.message = message
        self.tell_human = tell_human  # one sentence for the agent to relay: what a person must do
        self.ask_human = ask_human  # the question to put to that person, where one helps
        self.details = details

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code.split(":", 1)[0], 400)

    def as_dict(self) -> dict:
        body = {"code": self.code, "message": self.message, **self.details}
        if self.tell_human:
            body["tellHuman"] = self.tell_human
        if self.ask_human:
            body["askHuman"] = self.ask_human
        return body

    def __repr__(self) -> str:
        return f"ServiceError({self.code!r}, {self.message!r})"


def invalid(field: str, message: str) -> ServiceError:
    """A bad value of a known argument."""
    return ServiceError("INVALID_ARGUMENT", message, field=field)


def unknown_argument(field: str, message: str) -> ServiceError:
    """An argument the tool or endpoint does not have (SPEC §5: ``INVALID``, naming it)."""
    return ServiceError("INVALID", message, field=field)


def not_found(what: str) -> ServiceError:
    return ServiceError("NOT_FOUND", f"{what} was not found.")
