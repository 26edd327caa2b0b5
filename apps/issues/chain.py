"""Verifying an org's receipt chain, and folding receipts back into issues.

The links themselves (canonical bytes, hashing) are in apps.core.chain; the receipts are
written only by the unit of work (apps.work.writer).
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.core.chain import GENESIS, canonical, link_hash
from apps.issues.models import Activity, Issue
from apps.issues.services import FOLDED_FIELDS, fold, state_for_fold
from apps.orgs.models import Org


@dataclass
class Break:
    org: str
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"org {self.org}: chain broken at seq {self.seq}: {self.reason}"


def verify_org(org) -> Break | None:
    """Walk one org's entries in sequence order; return the first broken link, if any.

    The org's head (last seq and hash) is read fresh *after* walking, never taken from
    the passed object: a stale ``org`` would report appends made since it was loaded,
    and writers may append while we walk. An append commits its entries and the head
    together, so a head read after the walk is at least as far as the rows seen; when
    it is further, the walk continues from where it stopped.
    """
    expected_seq = 1
    prev = GENESIS
    while True:
        rows = (
            Activity.objects.filter(org_id=org.pk, seq__gte=expected_seq)
            .order_by("seq")
            .values_list(
                "seq", "issue_id", "principal_id", "key_id", "runtime", "verb", "created_at", "changes_enc", "prev_hash", "hash"
            )
            .iterator(chunk_size=2000)
        )
        for seq, issue_id, principal_id, key_id, runtime, verb, created_at, changes_enc, prev_hash, stored_hash in rows:
            if seq != expected_seq:
                return Break(
                    org.slug, expected_seq, f"expected seq {expected_seq}, found {seq} (an entry is missing or inserted)"
                )
            if prev_hash != prev:
                return Break(org.slug, seq, "prevHash does not match the previous entry's hash (reordered or replaced)")
            payload = canonical(
                org_id=org.pk,
                seq=seq,
                issue_id=issue_id,
                principal_id=principal_id,
                key_id=key_id,
                runtime=runtime,
                verb=verb,
                created_at=created_at,
                changes_enc=changes_enc,
            )
            if link_hash(prev_hash, payload) != stored_hash:
                return Break(org.slug, seq, "hash does not match the entry's content (edited)")
            prev = stored_hash
            expected_seq += 1
        head_seq, head_hash = Org.objects.values_list("activity_seq", "chain_head").get(pk=org.pk)
        last = expected_seq - 1
        if head_seq > last and Activity.objects.filter(org_id=org.pk, seq=expected_seq).exists():
            continue  # appended while we walked: keep walking
        if last != head_seq or prev != head_hash:
            how = "entries appended past the head" if last > head_seq else "entries removed"
            return Break(org.slug, expected_seq, f"the chain ends at seq {last} but the org's head is seq {head_seq} ({how})")
        return None


@dataclass
class Drift:
    org: str
    issue: str
    fields: list[str]

    def __str__(self) -> str:
        return f"org {self.org}: {self.issue} no longer matches its receipts (fields: {', '.join(self.fields)})"


def verify_folds(org) -> list[Drift]:
    """Fold every issue's receipts and compare with its row; return the issues that drifted.

    Catches a row edited behind the services' back (raw SQL, a forgotten ``unit.record``).
    Unlike ``verify_org`` this decrypts the receipts, so it needs the org's data key. Only
    field names are reported, never values: they are encrypted content.
    """
    drifts = []
    issues = Issue.objects.filter(org_id=org.pk).select_related("project", "parent__project", "checkpoint")
    for issue in issues.order_by("project__prefix", "number").iterator(chunk_size=500):
        entries = Activity.objects.filter(org_id=org.pk, issue_id=issue.pk).order_by("seq").only("org_id", "seq", "changes_enc")
        folded = fold(entries.iterator(chunk_size=500))
        state = state_for_fold(issue)
        empty = {"labels": []}
        wrong = [f for f in FOLDED_FIELDS if folded.get(f, empty.get(f)) != state[f]]
        if wrong:
            drifts.append(Drift(org.slug, issue.identifier, wrong))
    return drifts
