# The Claim model moves to the issues app (apps.issues.models). Only Django's state
# changes: the table leases_claim, its rows and its indexes stay exactly as they are.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0001_initial"),
        ("issues", "0005_sla_index_per_org"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Claim")],
            database_operations=[],
        ),
    ]
