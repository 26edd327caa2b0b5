"""Ready-to-paste MCP client configs for a freshly minted key (shown once).

The configs reference the key through the ``RETASC_KEY`` environment variable, so the
files can be committed; only the ``export`` line carries the secret.
"""

from __future__ import annotations

import json


def configs(*, mcp_url: str, raw_key: str) -> list[dict]:
    bearer = {"Authorization": "Bearer ${RETASC_KEY}"}
    return [
        {"name": "Shell", "file": "~/.bashrc / ~/.zshrc", "text": f"export RETASC_KEY={raw_key}"},
        {
            "name": "Claude Code",
            "file": ".mcp.json",
            "text": json.dumps({"mcpServers": {"retasc": {"type": "http", "url": mcp_url, "headers": bearer}}}, indent=2),
        },
        {
            "name": "Codex",
            "file": "~/.codex/config.toml",
            "text": f'[mcp_servers.retasc]\nurl = "{mcp_url}"\nbearer_token_env_var = "RETASC_KEY"',
        },
        {
            "name": "Cursor",
            "file": ".cursor/mcp.json",
            "text": json.dumps(
                {"mcpServers": {"retasc": {"url": mcp_url, "headers": {"Authorization": "Bearer ${env:RETASC_KEY}"}}}}, indent=2
            ),
        },
        {
            "name": "Gemini CLI",
            "file": ".gemini/settings.json",
            "text": json.dumps({"mcpServers": {"retasc": {"httpUrl": mcp_url, "headers": bearer}}}, indent=2),
        },
    ]
