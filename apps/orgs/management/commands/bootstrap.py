import os
from pathlib import Path

from django.conf import settings

from apps.core.commands import RetascCommand
from apps.orgs.services import bootstrap


class Command(RetascCommand):
    help = "Create or reuse the owner, org and project, and mint a new agent key (idempotent)."
    reused = False

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org name (its slug is derived from it).")
        parser.add_argument("--project", required=True, help="Project prefix, 2-10 characters.")
        parser.add_argument("--email", required=True, help="The owner's e-mail address.")
        parser.add_argument("--password", help="Set the owner's password (for the Dash).")
        parser.add_argument("--runtime", default="claude-code", help="Runtime of the minted key.")
        parser.add_argument("--lease-ttl", type=int, help="Lease TTL in seconds for the org.")
        parser.add_argument(
            "--reuse-key",
            action="store_true",
            help="Answer the key an earlier --reuse-key run minted (kept, mode 0600, in the data directory) "
            "while it is still live, instead of minting a new one.",
        )
        parser.add_argument("--new-key", action="store_true", help="With --reuse-key: mint a new key and keep that one.")

    def run(self, **o):
        kept = self._kept_key_path(o) if o["reuse_key"] else None
        previous = kept.read_text().strip() if kept and kept.exists() and not o["new_key"] else None
        result = bootstrap(
            org_name=o["org"],
            prefix=o["project"],
            email=o["email"],
            password=o["password"],
            runtime=o["runtime"],
            lease_ttl=o["lease_ttl"],
            reuse_key=previous,
        )
        reused = result.pop("reused")
        if kept and not reused:
            kept.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(result["agentKey"] + "\n")
        self.reused = reused
        base = settings.PUBLIC_URL
        password = result.pop("password", None)
        if password and o.get("json"):
            # --json prints exactly the SPEC's object; a generated password goes to stderr.
            self.stderr.write(f"retasc: owner password (shown once): {password}")
        elif password:
            result["password"] = password
        return {**result, "mcpUrl": f"{base}/mcp", "apiUrl": f"{base}/api/v1/"}

    @staticmethod
    def _kept_key_path(o) -> Path:
        name = "".join(c if c.isalnum() else "-" for c in f"{o['org']}-{o['project']}-{o['runtime']}".lower())
        return Path(settings.DATA_DIR) / "bootstrap-keys" / name

    def human(self, r):
        how = "the same key as last run; make run NEW_KEY=1 mints a new one" if self.reused else "shown once"
        return (
            f"Org {r['org']}, project {r['project']}, owner {r['email']}"
            + (f" (password, shown once: {r['password']})" if r.get("password") else "")
            + "\n"
            f"Agent key ({how}): {r['agentKey']}\n"
            f"MCP: {r['mcpUrl']}   API: {r['apiUrl']}"
        )
