"""Re-wrap every org's data key under the newest master key (SPEC §8, §14).

Rotation: prepend a new key to RETASC_MASTER_KEY ("new,old"), restart, run this command,
then drop the old key. Content is never re-encrypted: only the small wrapped data keys
in the key store change, so this is fast and safe to re-run (keys already wrapped by the
newest master key are skipped).
"""

from __future__ import annotations

from apps.core import keystore
from apps.core.commands import RetascCommand


class Command(RetascCommand):
    help = "Re-wrap every org's data key (and the start-up canary) under the newest master key."

    def run(self, **options) -> dict:
        rewrapped, total = keystore.rewrap_all()
        # The canary too: once every key is re-wrapped, the ring "new" alone must start.
        keystore.check_master_key()
        return {"rewrapped": rewrapped, "keys": total}

    def human(self, result: dict) -> str:
        return (
            f"re-wrapped {result['rewrapped']} of {result['keys']} org data key(s) under the newest "
            "master key; the older keys can now be removed from RETASC_MASTER_KEY"
        )
