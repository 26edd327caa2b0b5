"""Ready-to-paste MCP client configs for a freshly minted key (shown once).

The runtime configs are the ones ``retasc bind`` prints (``retasc.cli.agents``, one
source for both): they reference the key through ``RETASC_KEY``, so the files can be
committed; only the ``export`` line carries the secret.
"""

from __future__ import annotations

import json

from retasc.cli.agents import SERVER_NAME, blocks, claude_entry


def configs(*, mcp_url: str, raw_key: str) -> list[dict]:
    return [
        {"name": "Shell", "file": "~/.bashrc / ~/.zshrc", "text": f"export RETASC_KEY={raw_key}"},
        {
            "name": "Claude Code",
            "file": ".mcp.json",
            "text": json.dumps({"mcpServers": {SERVER_NAME: claude_entry(mcp_url)}}, indent=2),
        },
        *blocks(mcp_url),
    ]
