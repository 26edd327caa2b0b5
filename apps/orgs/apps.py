from django.apps import AppConfig


class OrgsConfig(AppConfig):
    name = "apps.orgs"
    label = "orgs"
