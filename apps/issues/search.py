"""The keyed search index of issues (apps.core.search): written with the content, in its
transaction; rebuilt per org by ``manage.py rebuild_search_index``."""

from __future__ import annotations

from django.db import transaction

from apps.core import search
from apps.issues.models import Issue, SearchTerm


def search_reindex(issue: Issue) -> None:
    """Replace ``issue``'s terms with those of its current title and body."""
    SearchTerm.objects.filter(issue_id=issue.pk).delete()
    terms = search.index_terms(str(issue.org_id), issue.title, issue.body)
    SearchTerm.objects.bulk_create([SearchTerm(org_id=issue.org_id, issue_id=issue.pk, term=t) for t in terms])


def search_rebuild(*, org_id, batch: int = 500) -> int:
    """Re-index every issue of one org (after its data key changed, or to repair)."""
    done = 0
    key = search.search_key(str(org_id))
    issues = Issue.objects.filter(org_id=org_id).only("pk", "org_id", "title_enc", "body_enc").order_by("pk")
    last = None
    while True:
        page = list((issues.filter(pk__gt=last) if last is not None else issues)[:batch])
        if not page:
            return done
        with transaction.atomic():
            SearchTerm.objects.filter(issue_id__in=[i.pk for i in page]).delete()
            rows = [
                SearchTerm(org_id=org_id, issue_id=i.pk, term=t)
                for i in page
                for t in search.hashed(key, search.terms(i.title) | search.terms(i.body))
            ]
            SearchTerm.objects.bulk_create(rows, batch_size=5000)
        done += len(page)
        last = page[-1].pk
