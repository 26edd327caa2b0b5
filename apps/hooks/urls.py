from django.urls import path

from apps.hooks import discord, slack, telegram, views

app_name = "hooks"

urlpatterns = [
    path("github/<str:connector_id>", views.github_hook, name="github"),
    path("gitlab/<str:connector_id>", views.gitlab_hook, name="gitlab"),
    path("telegram/<str:channel_id>", telegram.telegram, name="telegram"),
    path("slack/<str:channel_id>", slack.slack, name="slack"),
    path("discord/<str:channel_id>", discord.discord, name="discord"),
]
