"""The two refusals billing can cause, written once: the writer raises them, the Dash's
banner shows them to owners, and both carry ``tellHuman`` (only a person can act)."""

from __future__ import annotations

from apps.core.errors import ServiceError

_BLOCKS = {
    "BILLING_INACTIVE": (
        "The org's credit is used up; reads, heartbeat, checkpoint and release still work.",
        "Add credit to the org (Dash > Org > Billing) to resume dispatch.",
        "The org is out of credit; can you add some in the Dash (Org > Billing) so I can keep working?",
    ),
    "MONTHLY_CAP_REACHED": (
        "The org's monthly spend cap is reached; reads, heartbeat, checkpoint and release still work.",
        "Raise or clear the monthly cap (Dash > Org > Billing), or wait for next month.",
        "The org reached its monthly spend cap; can you raise it in the Dash (Org > Billing)?",
    ),
}


def billing_refusal(code: str) -> ServiceError:
    message, tell_human, ask_human = _BLOCKS[code]
    return ServiceError(code, message, tell_human=tell_human, ask_human=ask_human)
