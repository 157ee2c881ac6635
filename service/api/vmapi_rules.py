"""VMAPI's rules for the values a client gives, in the query or the body, with VMAPI's texts
for a refusal (sdc-vmapi ``lib/common/validation.js``): one rule each, so a value is refused
in the same words wherever it is given (docs/vmapi-compatibility.md, "VMAPI's error texts").

Each is matched whole (``fullmatch``): Python's ``$`` also matches before a final newline,
where JavaScript's, VMAPI's, does not, so ``re.match`` with ``^…$`` took ``"web0\\n"``."""

from __future__ import annotations

import re
from typing import Any

#: VMAPI's UUID_RE: lowercase, hyphenated, nothing around it. ``uuid.UUID`` also took upper
#: case, no hyphens, ``{…}`` braces and ``urn:uuid:``, none of which VMAPI takes, and the
#: spec says "UUIDs are lowercase".
UUID_RE = re.compile(r"[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}")
INVALID_UUID = "Invalid UUID"

ALIAS_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
ALIAS_RE_SHOWN = r"/^[a-zA-Z0-9][a-zA-Z0-9\_\.\-]*$/"  # as JavaScript prints VMAPI's regexp
ALIAS_MISMATCH = f"String does not match regexp: {ALIAS_RE_SHOWN}"
#: VMAPI's create validator: zonecfg keeps the alias base64-encoded in 255 bytes (189 raw).
ALIAS_MAX_LENGTH = 189

#: VMAPI's text for a body field it does not know (its unknown query parameter's too).
UNKNOWN_PARAMETER = "Invalid parameter"


def is_uuid(value: Any) -> bool:
    """Whether ``value`` is a UUID as VMAPI takes one (text, lowercase, hyphenated)."""
    return isinstance(value, str) and UUID_RE.fullmatch(value) is not None


def is_alias(value: Any) -> bool:
    """Whether ``value`` matches VMAPI's alias regexp (its length is checked apart)."""
    return isinstance(value, str) and ALIAS_RE.fullmatch(value) is not None
