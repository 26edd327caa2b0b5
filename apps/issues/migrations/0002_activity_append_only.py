"""On PostgreSQL, refuse UPDATE and DELETE of receipts in the database itself."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION retasc_activity_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'activity entries are append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER issues_activity_append_only
    BEFORE UPDATE OR DELETE ON issues_activity
    FOR EACH ROW EXECUTE FUNCTION retasc_activity_append_only();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS issues_activity_append_only ON issues_activity;
DROP FUNCTION IF EXISTS retasc_activity_append_only();
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("issues", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
