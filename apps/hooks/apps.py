from django.apps import AppConfig


class HooksConfig(AppConfig):
    """Inbound webhook endpoints (an interface): each verifies, parses and calls one service."""

    name = "apps.hooks"
    label = "hooks"
