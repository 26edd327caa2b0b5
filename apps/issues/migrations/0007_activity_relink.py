"""On PostgreSQL, let exactly one kind of transaction update receipts: the one-time
re-link of a chain written before the chain key (apps.issues.chain.chain_relink), which
sets ``retasc.chain_relink`` for its own transaction (SET LOCAL). Deletes stay refused."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION retasc_activity_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND current_setting('retasc.chain_relink', true) = 'on'
       AND NEW.id = OLD.id AND NEW.seq = OLD.seq AND NEW.org_id = OLD.org_id
       AND NEW.changes_enc = OLD.changes_enc AND NEW.created_at = OLD.created_at THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'activity entries are append-only';
END;
$$ LANGUAGE plpgsql;
"""
BACKWARD = """
CREATE OR REPLACE FUNCTION retasc_activity_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'activity entries are append-only';
END;
$$ LANGUAGE plpgsql;
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("issues", "0006_claim")]
    operations = [migrations.RunPython(forward, backward)]
