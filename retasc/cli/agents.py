"""MCP client configs for the agent runtimes `retasc bind` wires up.

None of them carries the secret: each references the ``RETASC_KEY`` environment variable
in the syntax its runtime expands (Claude Code ``${RETASC_KEY}``, Cursor
``${env:RETASC_KEY}``, OpenCode ``{env:RETASC_KEY}``, Codex ``bearer_token_env_var``,
Gemini ``$RETASC_KEY``). Cline does not expand variables in headers, so its block says
where to paste the key in the (untracked) settings file of the Cline extension.

For clients that prefer stdio, ``retasc mcp`` (run in the bound folder, or with
``RETASC_KEY`` set) serves the same tools; clients that only connect by URL (custom
connectors, hosted agents) take the /mcp URL and sign in with OAuth in the browser.
"""

from __future__ import annotations

import json
from pathlib import Path

from retasc.cli.errors import LOCAL, CliError

SERVER_NAME = "retasc"
CLAUDE_HEADER = "Bearer ${RETASC_KEY}"


def claude_entry(mcp_url: str) -> dict:
    return {"type": "http", "url": mcp_url, "headers": {"Authorization": CLAUDE_HEADER}}


def write_claude_mcp_json(folder: Path, mcp_url: str) -> Path:
    """Add (or replace) the ``retasc`` server in ``.mcp.json``, keeping every other server."""
    path = folder / ".mcp.json"
    data: dict = {}
    if path.exists():
        try:
            data = json.loads(path.read_text() or "{}")
        except ValueError:
            raise CliError(f"{path} is not valid JSON; fix or remove it, then run retasc bind again.", exit_code=LOCAL) from None
        if not isinstance(data, dict):
            raise CliError(f"{path} is not a JSON object; fix or remove it, then run retasc bind again.", exit_code=LOCAL)
    servers = data.setdefault("mcpServers", {})
    servers[SERVER_NAME] = claude_entry(mcp_url)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def blocks(mcp_url: str) -> list[dict]:
    """Secret-free, ready-to-paste configs for the other runtimes."""
    return [
        {
            "runtime": "codex",
            "name": "Codex",
            "file": "~/.codex/config.toml",
            "text": f'[mcp_servers.{SERVER_NAME}]\nurl = "{mcp_url}"\nbearer_token_env_var = "RETASC_KEY"',
        },
        {
            "runtime": "opencode",
            "name": "OpenCode",
            "file": "opencode.json",
            "text": json.dumps(
                {
                    "$schema": "https://opencode.ai/config.json",
                    "mcp": {
                        SERVER_NAME: {
                            "type": "remote",
                            "url": mcp_url,
                            "enabled": True,
                            "headers": {"Authorization": "Bearer {env:RETASC_KEY}"},
                        }
                    },
                },
                indent=2,
            ),
        },
        {
            "runtime": "cursor",
            "name": "Cursor",
            "file": ".cursor/mcp.json",
            "text": json.dumps(
                {"mcpServers": {SERVER_NAME: {"url": mcp_url, "headers": {"Authorization": "Bearer ${env:RETASC_KEY}"}}}},
                indent=2,
            ),
        },
        {
            "runtime": "cline",
            "name": "Cline",
            "file": "cline_mcp_settings.json (Cline's own settings, not in the repo)",
            "text": json.dumps(
                {
                    "mcpServers": {
                        SERVER_NAME: {
                            "type": "streamableHttp",
                            "url": mcp_url,
                            "disabled": False,
                            "headers": {"Authorization": "Bearer <paste the contents of .retasc/key here>"},
                        }
                    }
                },
                indent=2,
            ),
        },
        {
            "runtime": "gemini",
            "name": "Gemini CLI",
            "file": ".gemini/settings.json",
            "text": json.dumps(
                {"mcpServers": {SERVER_NAME: {"httpUrl": mcp_url, "headers": {"Authorization": "Bearer $RETASC_KEY"}}}}, indent=2
            ),
        },
        {
            "runtime": "stdio",
            "name": "Any client over stdio (retasc mcp)",
            "file": "the client's MCP settings; it must start the command in this folder (the key comes from .retasc)",
            "text": json.dumps({"mcpServers": {SERVER_NAME: {"command": "retasc", "args": ["mcp"]}}}, indent=2),
        },
        {
            "runtime": "oauth",
            "name": "Clients that connect by URL only (custom connectors, hosted agents)",
            "file": "the connector's URL field; you approve it in the Dash when it signs in (OAuth)",
            "text": mcp_url,
        },
    ]


def env_line(folder: Path) -> str:
    return f'export RETASC_KEY="$(cat {folder / ".retasc" / "key"})"'
