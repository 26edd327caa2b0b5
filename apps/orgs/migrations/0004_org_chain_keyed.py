from django.db import migrations, models


class Migration(migrations.Migration):
    """Orgs that exist when this runs have unkeyed (SHA-256) chains: they are marked
    ``chain_keyed=False`` until ``manage.py relink_chains`` re-links them once; orgs
    created afterwards start keyed."""

    dependencies = [
        ("orgs", "0003_oauth"),
    ]

    operations = [
        migrations.AddField(
            model_name="org",
            name="chain_keyed",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.AlterField(
            model_name="org",
            name="chain_keyed",
            field=models.BooleanField(default=True, editable=False),
        ),
    ]
