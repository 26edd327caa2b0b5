# The Claim model moves here from the leases app. Only Django's state changes: the table
# keeps its name (leases_claim), its rows and its indexes.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("issues", "0005_sla_index_per_org"),
        ("leases", "0002_claim_moves_to_issues"),
        ("orgs", "0002_invite_projectalias"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Claim",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        (
                            "kind",
                            models.CharField(choices=[("work", "Work"), ("review", "Review")], default="work", max_length=10),
                        ),
                        ("token_hash", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField()),
                        ("expires_at", models.DateTimeField()),
                        ("last_heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        ("ended_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "end_reason",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("released", "Released"),
                                    ("finished", "Finished"),
                                    ("submitted", "Submitted"),
                                    ("expired", "Expired"),
                                    ("revoked", "Revoked"),
                                ],
                                max_length=10,
                            ),
                        ),
                        (
                            "issue",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="claims", to="issues.issue"
                            ),
                        ),
                        (
                            "key",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="claims", to="orgs.agentkey"
                            ),
                        ),
                        (
                            "org",
                            models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="orgs.org"),
                        ),
                        (
                            "principal",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="+", to=settings.AUTH_USER_MODEL
                            ),
                        ),
                    ],
                    options={
                        "db_table": "leases_claim",
                        "indexes": [
                            models.Index(condition=models.Q(("ended_at__isnull", True)), fields=["key"], name="claim_open_by_key")
                        ],
                    },
                ),
            ],
        ),
    ]
