"""The Simplified Chinese catalog is complete and compiled: every Dash string has a
translation, none is a fuzzy guess, and the compiled .mo says what the .po says."""

from __future__ import annotations

import gettext
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PO = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
MO = PO.with_suffix(".mo")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
# {% translate "literal" %} and {% trans 'literal' %} (with or without "as var" / noop)
_TEMPLATE_TRANSLATE = re.compile(r"""\{%\s*(?:translate|trans)\s+(["'])(.*?)\1(?:\s+[^%]*)?%\}""")


_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _unquote(parts: list[str]) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), "".join(parts))


def entries() -> list[dict]:
    """The catalog's entries: msgid, msgid_plural, msgstr (or msgstr[0]) and flags."""
    found = []
    for block in PO.read_text(encoding="utf-8").split("\n\n"):
        entry: dict = {"flags": set(), "msgid": None, "plural": None, "msgstr": None}
        field = None
        parts: dict[str, list[str]] = {}
        for line in block.splitlines():
            if line.startswith("#,"):
                entry["flags"] |= {flag.strip() for flag in line[2:].split(",")}
                continue
            if line.startswith("#"):
                continue
            head = line.split(" ", 1)[0]
            if head in ("msgid", "msgid_plural", "msgstr", "msgstr[0]") or head.startswith("msgstr["):
                field = head
                parts[field] = []
            if field is not None:
                parts[field] += _STRING.findall(line)
        if "msgid" not in parts:
            continue
        entry["msgid"] = _unquote(parts["msgid"])
        entry["plural"] = _unquote(parts["msgid_plural"]) if "msgid_plural" in parts else None
        entry["msgstr"] = _unquote(parts.get("msgstr[0]") or parts.get("msgstr") or [])
        if entry["msgid"]:
            found.append(entry)
    return found


def test_every_entry_is_translated_and_none_is_fuzzy():
    catalog = entries()
    assert len(catalog) > 400
    fuzzy = [e["msgid"] for e in catalog if "fuzzy" in e["flags"]]
    empty = [e["msgid"] for e in catalog if not e["msgstr"]]
    assert fuzzy == [] and empty == []
    for e in catalog:  # placeholders survive translation
        assert sorted(re.findall(r"%\(\w+\)[sd]", e["msgid"])) == sorted(re.findall(r"%\(\w+\)[sd]", e["msgstr"])), e


def test_the_compiled_catalog_matches_the_source():
    with MO.open("rb") as f:
        compiled = gettext.GNUTranslations(f)
    for e in entries():
        if e["plural"]:
            assert compiled.ngettext(e["msgid"], e["plural"], 2) == e["msgstr"], e["msgid"]
        else:
            assert compiled.gettext(e["msgid"]) == e["msgstr"], e["msgid"]


def test_every_template_string_is_in_the_catalog():
    known = {e["msgid"] for e in entries()}
    missing = set()
    for template in (ROOT / "templates").rglob("*.html"):
        for _, text in _TEMPLATE_TRANSLATE.findall(template.read_text(encoding="utf-8")):
            if text not in known:
                missing.add(f"{template.relative_to(ROOT)}: {text}")
    assert sorted(missing) == []
