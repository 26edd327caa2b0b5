from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "apps.api"
    label = "api"

    def ready(self):
        from apps.api import schema  # noqa: F401  (registers the OpenAPI auth extensions)
