"""The API's JSON parser: DRF's, with deep nesting refused instead of crashing.

``json`` recurses once per nesting level; 100k nested ``[`` raised RecursionError and
answered 500. It is now a parse error: 400 ``INVALID_ARGUMENT`` like any body that is not
JSON (apps.api.errors). Cheap: the C decoder stops at the interpreter's recursion limit.
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from apps.core.errors import invalid, unknown_argument


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("The request body is nested too deeply.") from None


def body_fields(data, allowed, required=()) -> dict:
    """A request body's fields, checked once for every endpoint: a JSON object (or form),
    no field the endpoint does not take (SPEC §5: ``INVALID``, naming it), and the
    ``required`` ones present and not empty."""
    if not isinstance(data, dict):  # a QueryDict (form) is one too
        raise invalid("body", "The request body must be a JSON object.")
    unknown = sorted(set(data.keys()) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) or "nothing"
        raise unknown_argument(unknown[0], f"Unknown field {unknown[0]!r}; this endpoint takes {takes}.")
    for name in required:
        if data.get(name) in (None, ""):
            raise invalid(name, f"{name} is required.")
    return data
