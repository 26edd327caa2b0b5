"""Verifying an org's receipt chain, re-linking an old one, and folding receipts back into issues.

The links themselves (canonical bytes, the chain key, the signed head file) are in
apps.core.chain; the receipts are written only by the unit of work (apps.work.writer).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from apps.core import chain
from apps.core.chain import GENESIS, canonical
from apps.core.errors import ServiceError
from apps.core.unit import mutation
from apps.issues.models import Activity, Issue
from apps.issues.services import FOLDED_FIELDS, fold, state_for_fold
from apps.orgs.actor import Actor
from apps.orgs.models import Org

_COLUMNS = ("seq", "issue_id", "principal_id", "key_id", "runtime", "verb", "created_at", "changes_enc", "prev_hash", "hash")


@dataclass
class Break:
    org: str
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"org {self.org}: chain broken at seq {self.seq}: {self.reason}"


@dataclass(frozen=True)
class Verified:
    """A head known good: every entry up to ``seq`` verified, the last one's hash."""

    seq: int
    hash: str


@dataclass
class ChainCheck:
    broken: Break | None
    verified: Verified | None  # how far the chain is known good (None when broken)
    walked: int  # entries walked by this check
    anchored: bool  # the org has a signed head file and the chain contains its entry


def _rows(org_id, from_seq: int):
    """Receipts from ``from_seq`` on, in order. A row the database driver cannot even hand
    back (an undecodable value) yields None, which the walk reports as a broken link
    instead of a traceback; the rows before it are re-read one by one (a slow path taken
    only on a damaged chain), so the break names the right entry."""
    base = Activity.objects.filter(org_id=org_id).order_by("seq")
    rows = base.filter(seq__gte=from_seq).values_list(*_COLUMNS).iterator(chunk_size=2000)
    undecodable = (ValueError, TypeError, OverflowError, UnicodeDecodeError)
    next_seq = from_seq
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except undecodable:
            break
        next_seq = row[0] + 1 if isinstance(row[0], int) else next_seq
        yield row
    for seq in base.filter(seq__gte=next_seq).values_list("seq", flat=True):
        try:
            row = base.filter(seq=seq).values_list(*_COLUMNS).get()
        except undecodable:
            yield None
            return
        yield row


def _link_of(org_id, key: bytes | None, row) -> str:
    """The link a row should carry; raises ValueError/TypeError/AttributeError when the
    row cannot be decoded (a damaged value)."""
    seq, issue_id, principal_id, key_id, runtime, verb, created_at, changes_enc, prev_hash, _ = row
    payload = canonical(
        org_id=org_id,
        seq=seq,
        issue_id=issue_id,
        principal_id=principal_id,
        key_id=key_id,
        runtime=runtime,
        verb=verb,
        created_at=created_at,
        changes_enc=changes_enc,
    )
    if key is None:
        return chain.legacy_link_hash(prev_hash, payload)
    return chain.link_hash(key, prev_hash, payload)


def _walk(org, *, key: bytes | None, since: Verified | None, anchor: chain.Anchor | None):
    """Walk the chain after ``since``; (break or None, last seq, last hash, walked)."""
    expected_seq = since.seq + 1 if since else 1
    prev = since.hash if since else GENESIS
    walked = 0
    while True:
        for row in _rows(org.pk, expected_seq):
            if row is None:
                return Break(org.slug, expected_seq, "an entry cannot be decoded (damaged row)"), None, None, walked
            seq, stored_prev, stored_hash = row[0], row[8], row[9]
            if seq != expected_seq:
                return (
                    Break(org.slug, expected_seq, f"expected seq {expected_seq}, found {seq} (an entry is missing or inserted)"),
                    None,
                    None,
                    walked,
                )
            if stored_prev != prev:
                return (
                    Break(org.slug, expected_seq, "prevHash does not match the previous entry's hash (reordered or replaced)"),
                    None,
                    None,
                    walked,
                )
            try:
                good = _link_of(org.pk, key, row) == stored_hash
            except (ValueError, TypeError, AttributeError, OverflowError):
                return Break(org.slug, expected_seq, "an entry cannot be decoded (damaged row)"), None, None, walked
            if not good:
                return Break(org.slug, expected_seq, "hash does not match the entry's content (edited)"), None, None, walked
            if anchor is not None and seq == anchor.seq and stored_hash != anchor.hash:
                return (
                    Break(org.slug, expected_seq, "the entry differs from the one the signed head file anchors (rewritten)"),
                    None,
                    None,
                    walked,
                )
            prev = stored_hash
            expected_seq += 1
            walked += 1
        head_seq, head_hash = Org.objects.values_list("activity_seq", "chain_head").get(pk=org.pk)
        last = expected_seq - 1
        if head_seq > last and Activity.objects.filter(org_id=org.pk, seq=expected_seq).exists():
            continue  # appended while we walked: keep walking
        if last != head_seq or prev != head_hash:
            how = "entries appended past the head" if last > head_seq else "entries removed"
            return (
                Break(org.slug, expected_seq, f"the chain ends at seq {last} but the org's head is seq {head_seq} ({how})"),
                None,
                None,
                walked,
            )
        return None, last, prev, walked


def check_org(org, *, since: Verified | None = None) -> ChainCheck:
    """Verify one org's chain: every link under its chain key, and the signed head file.

    ``since``: a head this process verified before; only the entries after it are walked
    (its own entry is re-read and must be unchanged). The head file is read *before* the
    walk: it is written after commit, so it never anchors an entry the walk cannot see.

    The org's head (last seq and hash) is read fresh *after* walking, never taken from
    the passed object: a stale ``org`` would report appends made since it was loaded,
    and writers may append while we walk. An append commits its entries and the head
    together, so a head read after the walk is at least as far as the rows seen; when
    it is further, the walk continues from where it stopped.
    """
    keyed = Org.objects.values_list("chain_keyed", flat=True).get(pk=org.pk)
    if not keyed:
        reason = "the chain is not linked under the chain key yet (run manage.py relink_chains)"
        return ChainCheck(Break(org.slug, 1, reason), None, 0, False)
    try:
        anchor = chain.read_anchor(org.pk)
    except chain.AnchorError as exc:
        return ChainCheck(Break(org.slug, 0, f"{exc} (the head file was tampered with)"), None, 0, False)
    if since is not None and since.seq:
        stored = Activity.objects.filter(org_id=org.pk, seq=since.seq).values_list("hash", flat=True).first()
        if stored != since.hash:
            return ChainCheck(Break(org.slug, since.seq, "the entry changed after it was verified (edited)"), None, 0, False)
        if anchor is not None and anchor.seq <= since.seq:
            # The anchored entry was verified before; it must still be the anchored one.
            stored = Activity.objects.filter(org_id=org.pk, seq=anchor.seq).values_list("hash", flat=True).first()
            if stored != anchor.hash:
                reason = "the entry differs from the one the signed head file anchors (rewritten)"
                return ChainCheck(Break(org.slug, anchor.seq, reason), None, 0, False)
    broken, last, head, walked = _walk(org, key=chain.chain_key(org.pk), since=since, anchor=anchor)
    if broken is None and anchor is not None and anchor.seq > last:
        reason = f"the signed head file anchors seq {anchor.seq} but the chain ends at seq {last} (entries removed)"
        broken = Break(org.slug, last + 1, reason)
    if broken is not None:
        return ChainCheck(broken, None, walked, anchor is not None)
    return ChainCheck(None, Verified(last, head), walked, anchor is not None)


def verify_org(org) -> Break | None:
    """Walk one org's whole chain; return the first broken link, if any."""
    return check_org(org).broken


# --- the Dash's incremental check ---------------------------------------------------------

_verified: dict[str, tuple[Verified, float]] = {}
_verified_lock = threading.Lock()


def check_org_cached(org) -> ChainCheck:
    """``check_org`` from the last head this process verified for the org (SPEC §12: the
    issue page shows the chain's status on every load; a whole walk there cost 0.75 s at
    50k receipts). The cache holds a verified head for ``RETASC_CHAIN_RECHECK_SECONDS``;
    after that the next check walks the whole chain again, so an entry edited before the
    cached head is found within that time (``verify_chain`` finds it at once).
    """
    ref = str(org.pk)
    now = time.monotonic()
    with _verified_lock:
        cached = _verified.get(ref)
    since = cached[0] if cached and now - cached[1] < settings.RETASC_CHAIN_RECHECK_SECONDS else None
    result = check_org(org, since=since)
    with _verified_lock:
        if result.verified is None:
            _verified.pop(ref, None)
        else:
            _verified[ref] = (result.verified, cached[1] if since is not None else now)
    return result


def forget_verified() -> None:
    with _verified_lock:
        _verified.clear()


# --- re-linking a chain written before the chain key --------------------------------------


def chain_relink(*, org: Org) -> dict | None:
    """Re-link an unkeyed (SHA-256) chain under the org's chain key, once, and record it.

    The old chain is verified whole first: a chain that is already broken is refused, never
    re-linked (that would bless the tampering). An org that has a signed head file was
    keyed already, so a ``chain_keyed=False`` there is a database edit: refused too. The
    one time receipts are rewritten: only their ``prev_hash`` and ``hash`` change (on
    PostgreSQL the append-only trigger lets this one transaction through). Returns
    ``{org, entries, legacyHead, head}``, or None when the chain was keyed already.
    """
    with mutation(Actor.system(org), "chain_relink", charge=False) as unit:
        locked = Org.objects.select_for_update().only("chain_keyed", "activity_seq", "chain_head", "slug").get(pk=org.pk)
        if locked.chain_keyed:
            return None
        if chain.read_anchor(org.pk) is not None or chain.heads_dir().joinpath(f"{org.pk}.head").exists():
            raise ServiceError(
                "CONFLICT", f"Org {org.slug} has a signed head file, so its chain was keyed already; it is not re-linked."
            )
        broken, last, legacy_head, _ = _walk(locked, key=None, since=None, anchor=None)
        if broken is not None:
            raise ServiceError("CONFLICT", f"The chain is broken, so it is not re-linked: {broken}")
        key = chain.chain_key(org.pk)
        prev, updates = GENESIS, []
        for row in Activity.objects.filter(org_id=org.pk).order_by("seq").values_list(*_COLUMNS, "id").iterator(2000):
            new_hash = _link_of(org.pk, key, (*row[:8], prev, None))
            updates.append((prev, new_hash, row[10]))
            prev = new_hash
        table = connection.ops.quote_name(Activity._meta.db_table)
        with connection.cursor() as cur:
            if connection.vendor == "postgresql":
                cur.execute("SET LOCAL retasc.chain_relink = 'on'")  # see issues migration 0007
            cur.executemany(f"UPDATE {table} SET prev_hash = %s, hash = %s WHERE id = %s", updates)
        Org.objects.filter(pk=org.pk).update(chain_keyed=True, chain_head=prev)
        unit.record("chain_relinked", changes={"entries": [None, last], "legacyHead": [None, legacy_head]})
    return {"org": org.slug, "entries": last, "legacyHead": legacy_head, "head": Org.objects.get(pk=org.pk).chain_head}


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
