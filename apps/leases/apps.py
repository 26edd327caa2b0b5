from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "apps.leases"
    label = "leases"
