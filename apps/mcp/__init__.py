"""The MCP server (SPEC §5): streamable HTTP at /mcp, a thin interface over apps.tools.operations.

This package is ``apps.mcp``; the SDK is the top-level ``mcp`` package. Modules here
import the SDK absolutely (``from mcp.server...``) and never import ``mcp`` relatively.
"""
