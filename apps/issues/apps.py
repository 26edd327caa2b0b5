from django.apps import AppConfig


class IssuesConfig(AppConfig):
    name = "apps.issues"
    label = "issues"
