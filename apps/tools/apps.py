from django.apps import AppConfig


class ToolsConfig(AppConfig):
    """The tool facade: one function per SPEC tool, shared by MCP and the HTTP API."""

    name = "apps.tools"
    label = "tools"
