"""JSON responses serialized once, by orjson (C), instead of the standard library's encoder
(docs/performance.md, "A lean HTTP edge").

The bytes are what Starlette's ``JSONResponse`` writes for the same content (compact, UTF-8,
not ASCII-escaped), except where orjson cannot encode a value exactly: an integer beyond 64
bits (VMAPI metadata may hold any JSON number), which falls back to the standard encoder.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import JSONResponse


class FastJSONResponse(JSONResponse):
    """``JSONResponse`` rendered by orjson, with the standard encoder as the fallback."""

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except (TypeError, orjson.JSONEncodeError):
            return super().render(content)
