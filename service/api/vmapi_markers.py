"""VMAPI's JSON ListVms marker (``{"uuid": …, <sort key>: …}``, sdc-vmapi
``lib/common/marker.js``), checked with VMAPI's messages (api.md "Reads"), and the position
it names. Our opaque marker is ``projections.vm_markers``'.

Each sort key's value has a type. A value of another type named no row (``"ram": "x"``
compared as text, and the first page came back with the marker's own VM on it), so it is
refused naming ``marker``. Null is taken only for a key whose column may be empty (a VM with
no alias, image or server), and then stands for what that column sorts such a VM as.
"""

from __future__ import annotations

import json
from typing import Any

from domain import json_input
from domain.json_input import cut, unstorable
from projections.formats import MAX_INTEGER, rfc3339
from projections.vm_queries import MISSING, SORT_FIELDS
from service.api.params import parse_timestamp

STRING, INTEGER, TIMESTAMP, BOOLEAN = "a string", "an integer", "a timestamp", "a boolean"

#: sort key -> (the type its marker value has, whether null is taken). Every key of
#: ``projections.vm_queries.SORT_FIELDS`` has one (tests assert it). ``tags`` is VMAPI's tag
#: format (``-key=value-``), the text that key sorts by; ``create_timestamp`` is milliseconds
#: since the epoch or an RFC 3339 instant, as VMAPI's ``create_timestamp`` parameter.
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
    return f"Marker has an invalid {key} field: {cut(json.dumps(value))} (expected {expected})"


def read_vmapi_marker(marker: str, sort: str | None,
                      sort_field: str) -> tuple[tuple[Any, str] | None, list[str]]:
    """The position VMAPI's JSON ``marker`` names under the ``sort`` parameter (``sort_field``
    its key, as the query parsed it), as ``(sort value, uuid)``: the sort value as its column
    holds it (null as an empty column sorts), or ``MISSING`` when the marker names only the
    uuid. Or None, with what is wrong with the marker in VMAPI's words."""
    problems = marker_problems(marker, sort)
    if problems:
        return None, problems
    after = _position(sort_field, json_input.loads(marker))
    # an integer beyond MAX_INTEGER (no stored one is) overflows the database's 64-bit
    # integers when compared with its column (a 500)
    if isinstance(after[0], int) and abs(after[0]) > MAX_INTEGER:
        return None, [f"{sort_field} is out of range"]
    return after, []


def marker_problems(marker: str, sort: str | None) -> list[str]:
    """What is wrong with a VMAPI marker used with ``sort``, in VMAPI's words
    (lib/common/marker.js); empty when it is valid."""
    try:
        parsed = json_input.loads(marker)
    except json_input.JsonInputError as error:
        return [f"Could not parse marker as an object JSON representation, reason: {error}"]
    if not isinstance(parsed, dict):
        return ["Marker must represent an object."]
    # JSON escapes (\u0000, \ud800) got past the raw query's check: the same check here,
    # before any value is compared with a column or echoed in a message
    unstored = unstorable(parsed)
    if unstored:
        return [f"Marker has an invalid value: {unstored}"]
    stamp = parsed.get("create_timestamp")
    if stamp is not None and parse_timestamp(str(stamp)) is None:
        return [f"Marker has an invalid create_timestamp field: {cut(stamp)}"]
    problems = []
    if "uuid" not in parsed:
        problems.append("A marker needs to have a uuid property from which a strict total "
                        "order can be established")
    shown = "undefined" if sort is None else sort
    sort_key = (sort or "").split(".")[0]
    if sort is not None and sort_key not in parsed:
        problems.append(f"All sort fields must be present in marker. Sort fields: {shown}.")
    # VMAPI's isValidSortCriteria: no sort, or an empty one, is a valid criteria
    sort_valid = not sort or sort_key in SORT_FIELDS
    if not sort_valid or not all(key in ("uuid", sort_key) for key in parsed):
        problems.append("All marker keys except uuid must be present in the sort parameter. "
                        f"Sort fields: {shown}.")
    if not problems:  # every key is where it belongs: now each value's type
        problems = [problem for key in dict.fromkeys(("uuid", sort_key or "uuid"))
                    if (problem := marker_value_problem(key, parsed[key]))]
    return problems


def _position(field: str, marker: dict[str, Any]) -> tuple[Any, str]:
    """A valid marker's ``(sort value, uuid)`` under sort key ``field``."""
    uuid = marker["uuid"]
    if field not in marker:
        return MISSING, uuid
    value = marker[field]
    if field == "create_timestamp":
        return rfc3339(parse_timestamp(str(value))), uuid
    if field in ("docker", "billing_id"):  # recorded for no VM: every row sorts alike
        return (0 if field == "docker" else ""), uuid
    return ("" if value is None else whole(value)), uuid
