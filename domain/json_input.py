"""JSON a client sent (a marker, a header, a registration), parsed so that any text is either
a value or a ``JsonInputError`` naming why not: never another exception.

``json.loads`` raises ``RecursionError`` (not a ``ValueError``) past its recursion limit, about
1,000 levels of arrays or objects, so a caller catching ``ValueError`` let a deeply nested
value through as a 500. Every parse of client JSON goes through ``loads`` here.
"""

from __future__ import annotations

import json
from typing import Any


class JsonInputError(ValueError):
    """Client text that is not JSON; its message says why in a few words (the parser's own
    message for a syntax error). ``too_deep``: it may be valid JSON, nested past what the
    parser takes (text kept as it is would never be read back as a value)."""

    def __init__(self, reason: str, *, too_deep: bool = False):
        super().__init__(reason)
        self.too_deep = too_deep


def loads(text: str | bytes) -> Any:
    """The value of the JSON ``text``. Raises ``JsonInputError`` for text that is not JSON,
    is not UTF-8, or is nested too deeply to parse."""
    try:
        return json.loads(text)
    except RecursionError:
        raise JsonInputError(unparsable_reason(RecursionError()), too_deep=True) from None
    except UnicodeDecodeError as error:
        raise JsonInputError(unparsable_reason(error)) from None
    except ValueError as error:
        raise JsonInputError(str(error)) from None


def unparsable_reason(cause: BaseException | None) -> str:
    """Why JSON that is not a syntax error could not be parsed, in a few words."""
    if isinstance(cause, RecursionError):
        return "nested too deeply"  # past the parser's recursion limit, about 1,000 levels
    if isinstance(cause, UnicodeDecodeError):
        return "not UTF-8 text"
    return "it could not be parsed"
