"""What a ListVms marker's values may be (api.md "Reads"), in both forms.

VMAPI's JSON marker (``{"uuid": …, <key>: …}``): each sort key's value has a type. A value of
another type named no row (``"ram": "x"`` compared as text, and the first page came back with
the marker's own VM on it), so it is refused naming ``marker``. Null is taken only for a key
whose column may be empty (a VM with no alias, image or server), and then stands for what
that column sorts such a VM as.

Our opaque marker (``x-next-marker``) carries a value read from the sort key's column, so it
is refused unless it is one such a column holds (``is_column_position``): a forged one
(a timestamp that is not one, a uuid that is not one) named no row either, and the page came
back empty as if the listing had ended.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from domain.states import VmState
from projections.formats import MAX_INTEGER, parse_iso_instant, rfc3339

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


def _uuid(value: Any) -> bool:
    """A uuid as every uuid column holds one: lowercase, canonical."""
    try:
        return isinstance(value, str) and str(uuidlib.UUID(value)) == value
    except ValueError:
        return False


def _instant(value: Any) -> bool:
    """An instant as ``create_timestamp`` holds one (``rfc3339``'s text, nothing else)."""
    moment = parse_iso_instant(value) if isinstance(value, str) else None
    return moment is not None and moment.tzinfo is not None and rfc3339(moment) == value


_STATES = frozenset(state.value for state in VmState)

#: sort key -> whether a value is one its column (``SORT_FIELDS``' expression) holds for some
#: VM. An empty image or server sorts as ``""``; ``billing_id`` and ``docker`` are recorded
#: for no VM (every row sorts as ``""`` and ``0``). Brand, alias and tags are free text.
COLUMN_VALUES: dict[str, Callable[[Any], bool]] = {
    "uuid": _uuid, "owner_uuid": _uuid,
    "image_uuid": lambda v: v == "" or _uuid(v), "server_uuid": lambda v: v == "" or _uuid(v),
    "billing_id": lambda v: v == "", "docker": lambda v: v == 0,
    "ram": lambda v: type(v) is int and 0 <= v <= MAX_INTEGER,
    "max_physical_memory": lambda v: type(v) is int and 0 <= v <= MAX_INTEGER,
    "state": lambda v: v in _STATES, "create_timestamp": _instant,
    "brand": lambda v: isinstance(v, str) and v != "",
    "alias": lambda v: isinstance(v, str), "tags": lambda v: isinstance(v, str),
}


def is_column_position(key: str, value: Any, vm_uuid: Any) -> bool:
    """Whether our opaque marker's ``(value, vm_uuid)`` for sort key ``key`` is a position
    we could have handed out: a value its column holds, and a uuid. (Text no column can
    store, NUL or a lone surrogate, is the caller's check: ``schemas.unstorable``.)"""
    # a boolean is an int to Python, and 0 to the docker column: no marker carries one
    return _uuid(vm_uuid) and type(value) in (str, int) and COLUMN_VALUES[key](value)
