from django.apps import AppConfig


class DashConfig(AppConfig):
    name = "apps.dash"
    label = "dash"
    verbose_name = "The Dash"
