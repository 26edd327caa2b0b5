from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "apps.api"
    label = "api"

    def ready(self):
        # Imported in ready(), once the app registry is loaded: it registers the OpenAPI
        # auth extensions, which import DRF's and the API's authentication classes.
        from apps.api import schema  # noqa: F401
