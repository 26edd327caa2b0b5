from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operating a deployment: backup and restore, /metrics, request ids (SPEC §16)."""

    name = "apps.ops"
    label = "ops"
