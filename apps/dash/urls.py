from django.urls import path

from apps.dash.views import invite, issues, org, queue

app_name = "dash"

urlpatterns = [
    path("", queue.home, name="home"),
    path("queue/", queue.queue, name="queue"),
    path("queue/live/", queue.queue_live, name="queue_live"),
    path("fleet/", queue.fleet, name="fleet"),
    path("fleet/live/", queue.fleet_live, name="fleet_live"),
    path("issues/new/", issues.issue_new, name="issue_new"),
    path("issues/<str:identifier>/", issues.issue_detail, name="issue"),
    path("issues/<str:identifier>/live/", issues.issue_live, name="issue_live"),
    path("issues/<str:identifier>/edit/", issues.issue_edit, name="issue_edit"),
    path("issues/<str:identifier>/status/", issues.issue_status, name="issue_status"),
    path("issues/<str:identifier>/assign/", issues.issue_assign, name="issue_assign"),
    path("issues/<str:identifier>/triage/", issues.issue_triage, name="issue_triage"),
    path("issues/<str:identifier>/cancel/", issues.issue_cancel, name="issue_cancel"),
    path("issues/<str:identifier>/review/", issues.issue_review, name="issue_review"),
    path("issues/<str:identifier>/relations/", issues.relation_add, name="relation_add"),
    path("issues/<str:identifier>/relations/remove/", issues.relation_remove, name="relation_remove"),
    path("issues/<str:identifier>/comments/", issues.comment_add, name="comment_add"),
    path("issues/<str:identifier>/comments/<uuid:comment_id>/retract/", issues.comment_retract, name="comment_retract"),
    path("issues/<str:identifier>/attachments/", issues.attachment_add, name="attachment_add"),
    path(
        "issues/<str:identifier>/attachments/<uuid:attachment_id>/obsolete/",
        issues.attachment_obsolete,
        name="attachment_obsolete",
    ),
    path("org/projects/", org.projects, name="projects"),
    path("org/projects/new/", org.project_create, name="project_create"),
    path("org/projects/<str:prefix>/rename/", org.project_rename, name="project_rename"),
    path("org/members/", org.members, name="members"),
    path("org/members/<int:member_id>/<str:action>/", org.member_action, name="member_action"),
    path("org/invites/", org.invites, name="invites"),
    path("org/invites/new/", org.invite_create, name="invite_create"),
    path("org/invites/<int:invite_id>/revoke/", org.invite_revoke, name="invite_revoke"),
    path("org/keys/", org.keys, name="keys"),
    path("org/keys/new/", org.key_mint, name="key_mint"),
    path("org/keys/<int:key_id>/rotate/", org.key_rotate, name="key_rotate"),
    path("org/keys/<int:key_id>/revoke/", org.key_revoke, name="key_revoke"),
    path("org/switch/", org.org_switch, name="org_switch"),
    path("org/delete/", org.org_delete, name="org_delete"),
    path("invite/<str:code>/", invite.invite, name="invite"),
]
