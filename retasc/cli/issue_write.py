"""Changing issues from the CLI: ``retasc issue create|update|done|release|comment`` and
``retasc issue dep add|rm``.

With this folder's key (or ``RETASC_KEY``) they act as the folder's agent; without one,
as you (your personal token). Commands that act on a claim send the claim token this
folder's ``retasc next`` remembered (``--claim-token`` overrides it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from retasc.cli import claims
from retasc.cli.client import Api
from retasc.cli.errors import LOCAL, USAGE, CliError
from retasc.cli.issues import issue_app
from retasc.cli.output import JsonOpt, State, emit_json, handled, out, priority_number, priority_word, state

dep_app = typer.Typer(help="Blockers: ISSUE is blocked by BLOCKER.", no_args_is_help=True)

TokenOpt = Annotated[str | None, typer.Option("--claim-token", help="Default: the token this folder's retasc next received.")]


def _api(st: State) -> tuple[Api, str]:
    api = st.api()
    return api, ("key" if api.key else "token")


def _read_body(body: str | None, body_file: Path | None) -> str | None:
    if body is not None and body_file is not None:
        raise CliError("Give --body or --body-file, not both.", exit_code=USAGE)
    if body_file is None:
        return body
    if str(body_file) == "-":
        return sys.stdin.read()
    try:
        return body_file.read_text()
    except OSError as exc:
        raise CliError(f"Cannot read {body_file}: {exc.strerror or exc}.", exit_code=LOCAL) from None


def _print_issue(issue: dict, verb: str) -> None:
    out.print(
        f"{verb} [bold]{escape(issue['identifier'])}[/bold] ({issue['status']}, {priority_word(issue['priority'])}): "
        f"{escape(issue['title'])}"
    )


BodyOpt = Annotated[str | None, typer.Option("--body", help="Markdown body.")]
BodyFileOpt = Annotated[Path | None, typer.Option("--body-file", help="Read the body from a file, or - for stdin.")]


@issue_app.command("create")
@handled
def issue_create(
    ctx: typer.Context,
    title: Annotated[str, typer.Argument(help="The issue's title.")],
    body: BodyOpt = None,
    body_file: BodyFileOpt = None,
    priority: Annotated[str | None, typer.Option("--priority", help="urgent, high, medium, low or none.")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="A label (repeatable).")] = None,
    blocked_by: Annotated[list[str] | None, typer.Option("--blocked-by", help="A blocker, PREFIX-n (repeatable).")] = None,
    no_dependency: Annotated[str | None, typer.Option("--no-dependency", help="Why it has no blocker.")] = None,
    acceptance: Annotated[list[str] | None, typer.Option("--acceptance", help="A done criterion (repeatable).")] = None,
    work: Annotated[bool, typer.Option("--work/--container", help="Work an agent does, or a container of issues.")] = True,
    as_json: JsonOpt = False,
):
    """Create an issue (it needs --blocked-by or --no-dependency)."""
    if not blocked_by and no_dependency is None:
        raise CliError("Say what blocks it (--blocked-by ACME-1) or why nothing does (--no-dependency TEXT).", exit_code=USAGE)
    payload: dict = {"title": title, "work": work}
    text = _read_body(body, body_file)
    if text is not None:
        payload["body"] = text
    if priority is not None:
        payload["priority"] = priority_number(priority)
    if label:
        payload["labels"] = label
    if blocked_by:
        payload["blockedBy"] = blocked_by
    if no_dependency is not None:
        payload["noDependency"] = no_dependency
    if acceptance:
        payload["acceptance"] = acceptance
    api, auth = _api(state(ctx))
    with api:
        issue = api.post("/api/v1/issues", payload, auth=auth)
    emit_json(issue) if as_json else _print_issue(issue, "Created")


@issue_app.command("update")
@handled
def issue_update(
    ctx: typer.Context,
    identifier: Annotated[str, typer.Argument(help="PREFIX-n")],
    title: Annotated[str | None, typer.Option("--title")] = None,
    body: BodyOpt = None,
    body_file: BodyFileOpt = None,
    priority: Annotated[str | None, typer.Option("--priority", help="urgent, high, medium, low or none.")] = None,
    status: Annotated[str | None, typer.Option("--status", help="todo, doing, blocked, review, done, canceled.")] = None,
    assignee: Annotated[str | None, typer.Option("--assignee", help="An e-mail, member id, me or none.")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="Replace the labels (repeatable).")] = None,
    due: Annotated[str | None, typer.Option("--due", help="A date or ISO datetime; empty clears it.")] = None,
    cancel_reason: Annotated[str | None, typer.Option("--cancel-reason")] = None,
    claim_token: TokenOpt = None,
    as_json: JsonOpt = False,
):
    """Change the fields given (a held issue needs its claim token)."""
    st = state(ctx)
    payload: dict = {}
    text = _read_body(body, body_file)
    for name, value in (
        ("title", title),
        ("body", text),
        ("status", status),
        ("assignee", assignee),
        ("labels", label),
        ("dueAt", due),
        ("cancelReason", cancel_reason),
    ):
        if value is not None:
            payload[name] = value
    if priority is not None:
        payload["priority"] = priority_number(priority)
    if not payload:
        raise CliError("Nothing to change: give at least one option (see --help).", exit_code=USAGE)
    token = claims.token_for(st, identifier, claim_token)
    if token:
        payload["claimToken"] = token
    api, auth = _api(st)
    with api:
        issue = api.request("PATCH", f"/api/v1/issues/{identifier}", json=payload, auth=auth)
    if issue.get("status") in ("done", "canceled", "review"):
        claims.forget(st, identifier)
    emit_json(issue) if as_json else _print_issue(issue, "Updated")


@issue_app.command("done")
@handled
def issue_done(
    ctx: typer.Context,
    identifier: Annotated[str, typer.Argument(help="PREFIX-n")],
    evidence: Annotated[
        list[str] | None, typer.Option("--evidence", help="Evidence for each acceptance criterion, in order (repeatable).")
    ] = None,
    claim_token: TokenOpt = None,
    as_json: JsonOpt = False,
):
    """Finish a claimed issue, with evidence for its acceptance criteria."""
    st = state(ctx)
    payload: dict = {"status": "done"}
    if evidence:
        payload["evidence"] = evidence
    token = claims.token_for(st, identifier, claim_token)
    if token:
        payload["claimToken"] = token
    api, auth = _api(st)
    with api:
        issue = api.request("PATCH", f"/api/v1/issues/{identifier}", json=payload, auth=auth)
    claims.forget(st, identifier)
    emit_json(issue) if as_json else _print_issue(issue, "Done:")


@issue_app.command("release")
@handled
def issue_release(
    ctx: typer.Context,
    identifier: Annotated[str, typer.Argument(help="PREFIX-n")],
    note: Annotated[str | None, typer.Option("--note", help="A handoff note (becomes its checkpoint).")] = None,
    claim_token: TokenOpt = None,
    as_json: JsonOpt = False,
):
    """Give a claimed issue back to the queue."""
    st = state(ctx)
    token = claims.token_for(st, identifier, claim_token)
    if not token:
        raise CliError(f"No claim token for {identifier} in this folder; pass --claim-token.", exit_code=LOCAL)
    payload = {"claimToken": token, **({"note": note} if note else {})}
    api, auth = _api(st)
    with api:
        answer = api.post(f"/api/v1/issues/{identifier}/release", payload, auth=auth)
    claims.forget(st, identifier)
    if as_json:
        emit_json(answer)
    else:
        out.print(f"Released {escape(identifier.upper())}.")


@issue_app.command("comment")
@handled
def issue_comment(
    ctx: typer.Context,
    identifier: Annotated[str, typer.Argument(help="PREFIX-n")],
    text: Annotated[str | None, typer.Argument(help="The comment (markdown); or use --body-file.")] = None,
    body_file: BodyFileOpt = None,
    as_json: JsonOpt = False,
):
    """Comment on an issue."""
    body = _read_body(text, body_file)
    if not body or not body.strip():
        raise CliError("Give the comment as an argument or with --body-file.", exit_code=USAGE)
    api, auth = _api(state(ctx))
    with api:
        comment = api.post(f"/api/v1/issues/{identifier}/comments", {"body": body}, auth=auth)
    if as_json:
        emit_json(comment)
    else:
        out.print(f"Commented on {escape(identifier.upper())} (comment {comment['id']}).")


@dep_app.command("add")
@handled
def dep_add(
    ctx: typer.Context,
    identifier: Annotated[str, typer.Argument(help="The blocked issue, PREFIX-n")],
    blocker: Annotated[str, typer.Argument(help="The issue it waits for, PREFIX-n")],
    as_json: JsonOpt = False,
):
    """ISSUE is blocked by BLOCKER (a cycle is refused)."""
    api, auth = _api(state(ctx))
    with api:
        answer = api.post(f"/api/v1/issues/{blocker}/relations", {"targetId": identifier, "type": "blocks"}, auth=auth)
    if as_json:
        emit_json(answer)
    else:
        out.print(f"{escape(identifier.upper())} is blocked by {escape(blocker.upper())}.")


@dep_app.command("rm")
@handled
def dep_rm(
    ctx: typer.Context,
    identifier: Annotated[str, typer.Argument(help="The blocked issue, PREFIX-n")],
    blocker: Annotated[str, typer.Argument(help="The issue it waited for, PREFIX-n")],
    as_json: JsonOpt = False,
):
    """ISSUE is no longer blocked by BLOCKER."""
    api, auth = _api(state(ctx))
    with api:
        answer = api.request("DELETE", f"/api/v1/issues/{blocker}/relations/blocks/{identifier}", auth=auth)
    if as_json:
        emit_json(answer)
    else:
        out.print(f"{escape(identifier.upper())} is no longer blocked by {escape(blocker.upper())}.")
