"""The API's JSON parser: DRF's, with deep nesting refused instead of crashing.

``json`` recurses once per nesting level; 100k nested ``[`` raised RecursionError and
answered 500. It is now a parse error: 400 ``INVALID_ARGUMENT`` like any body that is not
JSON (apps.api.errors). Cheap: the C decoder stops at the interpreter's recursion limit.
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("The request body is nested too deeply.") from None
