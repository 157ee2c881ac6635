"""Text and numbers a client sent that no table could store or answer carry: checked before
anything is appended or kept, by every request body (``service.api.schemas.StrictModel``), a
URL (``service.api.params``) and a changefeed registration (``service.changes.triton``).
"""

from __future__ import annotations

import math
from typing import Any


def unstorable(value: Any, path: str = "") -> str | None:
    """Why ``value`` (a parsed JSON value) cannot be stored and served, naming where in it,
    or None. A NUL character or a lone surrogate in a string or key (PostgreSQL's text refuses
    the first, UTF-8 the second: a stored event holding one stopped every read model on it)
    and a non-finite number (``NaN``, ``Infinity``: no JSON response can carry it) are refused
    before anything is appended."""
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path or 'value'}: strings may not contain the NUL character"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path or 'value'}: strings must be valid Unicode (a lone surrogate)"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{path or 'value'}: numbers must be finite"
    elif isinstance(value, dict):
        for key, item in value.items():
            shown = printable(str(key))
            where = f"{path}.{shown}" if path else shown
            found = unstorable(str(key), f"{where} (the key)") or unstorable(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = unstorable(item, f"{path}[{index}]")
            if found:
                return found
    return None


def printable(text: str) -> str:
    """``text`` safe to put in an error message: NUL and lone surrogates escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
