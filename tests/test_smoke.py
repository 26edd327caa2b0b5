from apps.issues.chain import verify_org
from apps.leases import services as leases
from tests.conftest import new_issue


def test_agent_loop_end_to_end(world):
    blocker = new_issue(world.a, "Blocker", priority=4)
    urgent = new_issue(world.a, "Urgent", blocked_by=[blocker.identifier], priority=1)
    claim = leases.next_issue(actor=world.a)
    assert claim["issue"]["identifier"] == blocker.identifier
    assert claim["issue"]["effectivePriority"] == 1
    assert claim["branch"] == f"acme-{blocker.number}/blocker"
    world.org.refresh_from_db()
    assert verify_org(world.org) is None
    assert urgent.identifier.startswith("ACME-")
