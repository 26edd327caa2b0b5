"""/api/v1/cli/... (the CLI's endpoints) and /api/v1/export; included before apps.api.urls."""

from django.urls import path

from apps.api.export import Export
from apps.devices import api

urlpatterns = [
    path("cli/device/start", api.DeviceStart.as_view(), name="cli-device-start"),
    path("cli/device/poll", api.DevicePoll.as_view(), name="cli-device-poll"),
    path("cli/logout", api.Logout.as_view(), name="cli-logout"),
    path("cli/me", api.Me.as_view(), name="cli-me"),
    path("cli/orgs", api.Orgs.as_view(), name="cli-orgs"),
    path("cli/projects", api.Projects.as_view(), name="cli-projects"),
    path("cli/invites", api.Invites.as_view(), name="cli-invites"),
    path("cli/invites/redeem", api.InviteRedeem.as_view(), name="cli-invite-redeem"),
    path("cli/invites/<str:ref>/revoke", api.InviteRevoke.as_view(), name="cli-invite-revoke"),
    path("cli/keys", api.Keys.as_view(), name="cli-keys"),
    path("cli/keys/<str:ref>/rotate", api.KeyRotate.as_view(), name="cli-key-rotate"),
    path("cli/keys/<str:ref>/revoke", api.KeyRevoke.as_view(), name="cli-key-revoke"),
    path("export", Export.as_view(), name="export"),
]
