from apps.core.commands import RetascCommand
from apps.issues.ranking import sla_escalate
from apps.leases.services import reclaim_expired


class Command(RetascCommand):
    help = "Run the reclaim job once: free expired leases (with receipts) and apply SLA escalations."

    def run(self, **o):
        return {"reclaimed": reclaim_expired(), "escalated": sla_escalate()}
