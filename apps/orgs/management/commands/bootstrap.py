from django.conf import settings

from apps.core.commands import RetascCommand
from apps.orgs.services import bootstrap


class Command(RetascCommand):
    help = "Create or reuse the owner, org and project, and mint a new agent key (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Org name (its slug is derived from it).")
        parser.add_argument("--project", required=True, help="Project prefix, 2-10 characters.")
        parser.add_argument("--email", required=True, help="The owner's e-mail address.")
        parser.add_argument("--password", help="Set the owner's password (for the Dash).")
        parser.add_argument("--runtime", default="claude-code", help="Runtime of the minted key.")
        parser.add_argument("--lease-ttl", type=int, help="Lease TTL in seconds for the org.")

    def run(self, **o):
        result = bootstrap(
            org_name=o["org"],
            prefix=o["project"],
            email=o["email"],
            password=o["password"],
            runtime=o["runtime"],
            lease_ttl=o["lease_ttl"],
        )
        base = settings.PUBLIC_URL
        password = result.pop("password", None)
        if password and o.get("json"):
            # --json prints exactly the SPEC's object; a generated password goes to stderr.
            self.stderr.write(f"retasc: owner password (shown once): {password}")
        elif password:
            result["password"] = password
        return {**result, "mcpUrl": f"{base}/mcp", "apiUrl": f"{base}/api/v1/"}

    def human(self, r):
        return (
            f"Org {r['org']}, project {r['project']}, owner {r['email']}"
            + (f" (password, shown once: {r['password']})" if r.get("password") else "")
            + "\n"
            f"Agent key (shown once): {r['agentKey']}\n"
            f"MCP: {r['mcpUrl']}   API: {r['apiUrl']}"
        )
