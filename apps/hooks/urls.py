from django.urls import path

from apps.hooks import discord, slack, telegram

app_name = "hooks"

urlpatterns = [
    path("telegram/<str:channel_id>", telegram.telegram, name="telegram"),
    path("slack/<str:channel_id>", slack.slack, name="slack"),
    path("discord/<str:channel_id>", discord.discord, name="discord"),
]
