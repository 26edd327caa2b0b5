from django.apps import AppConfig


class HooksConfig(AppConfig):
    """Inbound webhooks from third parties: one module per provider (an interface)."""

    name = "apps.hooks"
    label = "hooks"
