from django.urls import path

from apps.hooks import views

app_name = "hooks"

urlpatterns = [
    path("github/<str:connector_id>", views.github_hook, name="github"),
    path("gitlab/<str:connector_id>", views.gitlab_hook, name="gitlab"),
]
