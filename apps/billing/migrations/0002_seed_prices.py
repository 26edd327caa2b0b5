from django.db import migrations

PRICES = {"dispatch": 7000, "work": 5000, "bookkeeping": 3000, "plumbing": 1000, "heartbeat": 100}


def seed(apps, schema_editor):
    Price = apps.get_model("billing", "Price")
    for tier, amount in PRICES.items():
        Price.objects.get_or_create(tier=tier, defaults={"amount_micros": amount})


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
