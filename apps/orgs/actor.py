"""Who is acting: the principal (a human), the runtime, and the key (if any)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apps.orgs.models import AgentKey, Membership, Org, Project


@dataclass(frozen=True)
class Actor:
    org: Org
    principal_id: int | None  # None only for the system (reclaim, escalation jobs)
    key: AgentKey | None  # None for a human in the browser ("dash") or the system
    runtime: str  # the key's runtime, "dash", or "system"
    project: Project | None = None  # the key's default project
    membership: Membership | None = None

    @property
    def is_agent(self) -> bool:
        return self.key is not None

    @property
    def is_owner(self) -> bool:
        return self.membership is not None and self.membership.role == "owner"

    @property
    def key_id(self) -> int | None:
        return self.key.pk if self.key is not None else None

    @property
    def limit_key_id(self) -> int | None:
        """The key whose claim cap and rate limit this actor spends: a session key
        spends its parent's (SPEC §2), so minting sessions multiplies neither."""
        if self.key is None:
            return None
        return self.key.parent_id or self.key.pk

    @classmethod
    def system(cls, org: Org) -> Actor:
        return cls(org=org, principal_id=None, key=None, runtime="system")
