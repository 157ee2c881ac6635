"""The type of each sort key's value in a VMAPI ListVms marker (``{"uuid": …, <key>: …}``;
api.md "Reads"). A value of another type named no row (``"ram": "x"`` compared as text, and
the first page came back with the marker's own VM on it), so it is refused naming ``marker``.
Null is taken only for a key whose column may be empty (a VM with no alias, image or server),
and then stands for what that column sorts such a VM as.
"""

from __future__ import annotations

import json
from typing import Any

from projections.formats import MAX_INTEGER

STRING, INTEGER, TIMESTAMP, BOOLEAN = "a string", "an integer", "a timestamp", "a boolean"

#: sort key -> (the type its marker value has, whether null is taken). Every key of
#: ``projections.vm_queries.SORT_FIELDS`` has one (tests assert it). ``tags`` is VMAPI's tag
#: format (``-key=value-``), the text that key sorts by; ``create_timestamp`` is milliseconds
#: since the epoch or ISO 8601, as VMAPI's ``create_timestamp`` parameter.
MARKER_TYPES: dict[str, tuple[str, bool]] = {
    "uuid": (STRING, False), "owner_uuid": (STRING, False), "brand": (STRING, False),
    "state": (STRING, False), "tags": (STRING, False),
    "alias": (STRING, True), "image_uuid": (STRING, True), "server_uuid": (STRING, True),
    "billing_id": (STRING, True),
    "ram": (INTEGER, False), "max_physical_memory": (INTEGER, False),
    "create_timestamp": (TIMESTAMP, False), "docker": (BOOLEAN, True),
}


def whole(value: Any) -> Any:
    """``value`` as an ``int`` when it is a float holding a whole number a column can hold
    (``128.0``: JSON does not tell it from ``128``, and Python's ``json`` writes it so);
    anything else as it is."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INTEGER:
        return int(value)
    return value


def _is(kind: str, value: Any) -> bool:
    if kind == STRING:
        return isinstance(value, str)
    if kind == BOOLEAN:
        return isinstance(value, bool)
    value = whole(value)
    integer = isinstance(value, int) and not isinstance(value, bool)
    return integer or (kind == TIMESTAMP and isinstance(value, str))


def marker_value_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the marker's value of sort key ``key`` (a key of
    ``MARKER_TYPES``), in the words of VMAPI's marker errors ("Marker has an invalid … field");
    None when it has the key's type. Whether a timestamp's text parses is checked by the
    caller, with VMAPI's own message."""
    kind, nullable = MARKER_TYPES[key]
    if (value is None and nullable) or (value is not None and _is(kind, value)):
        return None
    expected = f"{kind} or null" if nullable else kind
    return f"Marker has an invalid {key} field: {json.dumps(value)} (expected {expected})"
