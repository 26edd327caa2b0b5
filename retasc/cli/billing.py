"""``retasc billing``: balance, this month's spend, the cap and the last ledger entries;
``retasc billing cap 50`` / ``--clear`` sets or clears the monthly cap (owners only)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated

import typer
from rich.markup import escape

from retasc.cli.errors import CliError
from retasc.cli.output import JsonOpt, emit_json, handled, out, state

billing_app = typer.Typer(help="Balance, spend, the monthly cap and the ledger (owners).")

RECENT = 10


def usd(micros: int | None, places: int = 2) -> str:
    if micros is None:
        return "none"
    sign = "-" if micros < 0 else ""
    return f"{sign}${abs(micros) / 1_000_000:,.{places}f}"


@billing_app.callback(invoke_without_command=True)
@handled
def billing(ctx: typer.Context, as_json: JsonOpt = False):
    """Balance, this month's spend against the cap, and the last ledger entries."""
    if ctx.invoked_subcommand is not None:
        return
    with state(ctx).api() as api:
        summary = api.get("/api/v1/billing")
        ledger = api.get("/api/v1/billing/ledger", params={"limit": RECENT})
    if as_json:
        emit_json({**summary, "ledger": ledger["entries"]})
        return
    out.print(f"Balance:      {usd(summary['balanceMicros'])}")
    cap = summary["monthlyCapMicros"]
    out.print(f"Spent {summary['month']}: {usd(summary['monthSpendMicros'])} (cap {usd(cap) if cap is not None else 'none'})")
    blocked = summary.get("blocked") or summary.get("wouldBlock")
    if blocked:
        state_word = "blocked" if summary.get("blocked") else "would block if enforced"
        out.print(f"Dispatch:     {state_word}: {blocked}")
    # One line per entry (no table: long notes would wrap every column in a narrow terminal).
    out.print(f"Last {len(ledger['entries'])} entries (UTC; amount, balance after, key or note):")
    for e in ledger["entries"]:
        who = f"{e['key']}…" if e["key"] else (e["note"] or "")
        line = f"  {e['at'][:16].replace('T', ' ')}  {e['action']:<16} {usd(e['amountMicros'], 4):>11} {usd(e['balanceAfterMicros'], 4):>12}  {who}"
        out.print(escape(line))


@billing_app.command("cap")
@handled
def cap(
    ctx: typer.Context,
    dollars: Annotated[str | None, typer.Argument(help="The monthly cap in dollars, e.g. 50.")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the monthly cap.")] = False,
    as_json: JsonOpt = False,
):
    """Set the monthly spend cap in dollars, or --clear it (owners only; a receipt)."""
    if clear == (dollars is not None):
        raise CliError("Give the cap in dollars (retasc billing cap 50) or --clear, not both.", exit_code=2)
    micros = None
    if dollars is not None:
        try:
            amount = Decimal(dollars.replace(",", "").removeprefix("$"))
        except InvalidOperation:
            raise CliError(f"{dollars!r} is not an amount in dollars.", exit_code=2) from None
        if not amount.is_finite() or amount < 0 or abs(amount) > 10**7 or amount != round(amount, 6):
            raise CliError(f"{dollars!r} is not an amount in dollars from 0 to 10000000.", exit_code=2)
        micros = int(amount * 1_000_000)
    with state(ctx).api() as api:
        answer = api.request("PUT", "/api/v1/billing/cap", json={"capMicros": micros})
    if as_json:
        emit_json(answer)
        return
    if answer["monthlyCapMicros"] is None:
        out.print("Monthly cap cleared.")
    else:
        out.print(f"Monthly cap set to {usd(answer['monthlyCapMicros'])}.")
