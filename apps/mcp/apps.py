from django.apps import AppConfig


class McpConfig(AppConfig):
    name = "apps.mcp"
    label = "retasc_mcp"  # "mcp" would read like the SDK package
    verbose_name = "MCP server"
