"""Search over sealed text: words become keyed terms, never plaintext (SPEC §8).

An issue's title and body are split into terms (below); each term is stored as
``HMAC-SHA-256(search key, term)`` cut to 16 bytes, where the search key is derived
from the org's data key (HKDF, its own label). The index therefore holds no plaintext
and means nothing without the org's key; crypto-shredding an org (destroying its data
key) makes its index meaningless too.

What it leaks, by design: within one org, equal terms have equal index entries, so
someone holding the database sees how many issues share a term and which, without
learning the term. Across orgs, entries differ (different keys).

Terms: the text is NFKC-normalized and case-folded; every run of letters or digits is a
word. Runs of CJK characters (Han, kana, Hangul), which have no spaces between words,
are indexed as overlapping character bigrams (a single CJK character stays one term), so
a two-character query finds every text containing it. A query is split the same way and
matches an issue when any of its terms do; results rank by how many of them match.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from apps.core import keystore

TERM_BYTES = 16
MAX_TERM_CHARS = 64  # longer runs (hashes, base64 blobs) are cut, not dropped
MAX_QUERY_TERMS = 32
_WORDS = re.compile(r"\w+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]+")


def terms(text: str | None) -> set[str]:
    """The distinct terms of ``text`` (see the module doc)."""
    found: set[str] = set()
    if not text:
        return found
    folded = unicodedata.normalize("NFKC", text).casefold()
    for word in _WORDS.findall(folded):
        last = 0
        for run in _CJK.finditer(word):
            _add_word(found, word[last : run.start()])
            chars = run.group()
            if len(chars) == 1:
                found.add(chars)
            else:
                found.update(chars[i : i + 2] for i in range(len(chars) - 1))
            last = run.end()
        _add_word(found, word[last:])
    return found


def _add_word(found: set[str], word: str) -> None:
    word = word.strip("_")
    if word:
        found.add(word[:MAX_TERM_CHARS])


def search_key(org_ref: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"retasc search index v1").derive(
        keystore.data_key(org_ref)
    )


def hashed(key: bytes, words) -> list[bytes]:
    return [hmac.new(key, word.encode(), hashlib.sha256).digest()[:TERM_BYTES] for word in sorted(words)]


def index_terms(org_ref: str, *texts: str | None) -> list[bytes]:
    """The keyed terms to store for a document made of ``texts``."""
    words: set[str] = set()
    for text in texts:
        words |= terms(text)
    return hashed(search_key(org_ref), words) if words else []


def query_terms(org_ref: str, query: str) -> list[bytes]:
    """The keyed terms of a query (at most MAX_QUERY_TERMS, the longest first)."""
    words = sorted(terms(query), key=lambda w: (-len(w), w))[:MAX_QUERY_TERMS]
    return hashed(search_key(org_ref), words) if words else []
