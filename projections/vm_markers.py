"""Our opaque ListVms marker (``x-next-marker``): the position of a page's last VM, as
``(sort value, uuid)`` and the sort it was made for, in URL-safe base64 JSON.

A marker comes back from a client, so ``decode_marker`` takes only one we could have handed
out (api.md, "Reads"): made for the same sort (the position is one in that order; a marker of
another sort is refused naming the sort it was made for), its text storable (a NUL or a lone surrogate,
written as a JSON escape, got past the raw query's check and answered 500: PostgreSQL refuses
the first in text, UTF-8 the second), and a value the sort key's column holds. A forged one
(a timestamp that is not one, a uuid that is not one) named no row, and the page came back
empty as if the listing had ended.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from domain import json_input
from domain.json_input import cut, unstorable
from domain.states import VmState
from projections.formats import MAX_INTEGER, parse_iso_instant, rfc3339

# The sort keys whose column holds integers (the others hold text).
INTEGER_SORT_FIELDS = frozenset({"max_physical_memory", "ram", "docker"})


class InvalidMarkerError(ValueError):
    """A ``marker`` that no previous page handed out for the request's sort. ``made_for``:
    the sort it was handed out for (``create_timestamp.desc``), when it is one of ours made
    for another sort; None for one no page could have handed out (forged), whose claimed
    sort is not repeated. ``reason``: why, for one of ours made for the request's sort whose
    value or uuid no VM has there ("Marker has an invalid ram field: …"), or that names no
    sort at all."""

    def __init__(self, marker: str, *, made_for: str | None = None, reason: str | None = None):
        super().__init__(marker)
        self.made_for = made_for
        self.reason = reason  # what is wrong with it, in the words of VMAPI's marker errors


def encode_marker(sort: str, sort_value: Any, uuid: str) -> str:
    """The opaque cursor naming the last row of a page, and the order (``sort``) it is in."""
    raw = json.dumps([sort, sort_value, uuid]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_marker(marker: str, sort: str) -> tuple[Any, str]:
    """The ``(sort value, uuid)`` a marker names. Raises ``InvalidMarkerError`` unless it is
    one we could have handed out for ``sort`` (``ram.desc``): made for that sort, its text
    storable, its value one the sort key's column holds (``COLUMN_VALUES``: a value of another
    type would make the database refuse the comparison, a forged one names no row) and its
    uuid a uuid as the table holds them."""
    return _checked(marker, _decoded(marker), sort)


def decode_our_marker(marker: str, sort: str) -> tuple[Any, str] | None:
    """``decode_marker``'s answer, or None for a marker without the form of the cursors
    vmledger hands out (VMAPI's JSON): the marker is decoded once either way. Raises
    ``InvalidMarkerError`` for one of our form that we could not have handed out for
    ``sort``."""
    try:
        fields = _decoded(marker)
    except InvalidMarkerError:
        return None
    return _checked(marker, fields, sort)


def _checked(marker: str, fields: list, sort: str) -> tuple[Any, str]:
    """The ``(sort value, uuid)`` of a marker's decoded ``fields``, checked as
    ``decode_marker`` says."""
    made_for, value, uuid = fields
    if made_for != sort:
        if _a_sort(made_for):
            raise InvalidMarkerError(marker, made_for=made_for)
        raise InvalidMarkerError(marker, reason="Marker was made for no sort a page is listed "
                                                "in: send a page's x-next-marker as it came")
    problem = _value_problem(sort.split(".")[0], value, uuid)
    if problem is not None:
        raise InvalidMarkerError(marker, reason=problem)
    return value, uuid


def _value_problem(key: str, value: Any, uuid: Any) -> str | None:
    """Why a marker's sort ``value`` and ``uuid`` name no place in the order of ``key``
    (a value of another type would make the database refuse the comparison, one no VM has
    there names no row), in the words of VMAPI's marker errors; None if they do."""
    shown = cut(json.dumps(value))
    wanted = int if key in INTEGER_SORT_FIELDS else str
    # type(), not isinstance(): a boolean is an int to Python, and 0 to the docker column
    if type(value) is not wanted:
        expected = "an integer" if wanted is int else "a string"
        return f"Marker has an invalid {key} field: {shown} (expected {expected})"
    unstored = unstorable(value, key)
    if unstored is not None:
        return f"Marker has an invalid value: {unstored}"
    if not COLUMN_VALUES[key](value):
        return f"Marker has an invalid {key} field: {shown} (no VM's {key} sorts as that)"
    if not _uuid(uuid):
        return (f"Marker has an invalid uuid field: {cut(json.dumps(uuid))} (expected a "
                "lowercase uuid)")
    return None


def _a_sort(value: Any) -> bool:
    """Whether ``value`` names a sort a marker could have been made for (``ram.desc``)."""
    if not isinstance(value, str):
        return False
    key, _, order = value.partition(".")
    return key in COLUMN_VALUES and order in ("asc", "desc")


def _decoded(marker: str) -> list:
    """The three values (sort, sort value, uuid) of a marker's URL-safe base64 JSON, its
    padding stripped. Raises ``InvalidMarkerError`` for text that is not base64 of a JSON
    array of three values."""
    try:
        padded = marker + "=" * (-len(marker) % 4)
        decoded = json_input.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, TypeError) as error:
        raise InvalidMarkerError(marker) from error
    if not (isinstance(decoded, list) and len(decoded) == 3):
        raise InvalidMarkerError(marker)
    return decoded


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

#: sort key -> whether a value (of the key's type: ``INTEGER_SORT_FIELDS``) is one its column
#: (``vm_queries.SORT_FIELDS``' expression) holds for some VM. An empty image or server sorts
#: as ``""``; ``billing_id`` and ``docker`` are recorded for no VM (every row sorts as ``""``
#: and ``0``). Brand, alias and tags are free text.
COLUMN_VALUES: dict[str, Callable[[Any], bool]] = {
    "uuid": _uuid, "owner_uuid": _uuid,
    "image_uuid": lambda v: v == "" or _uuid(v), "server_uuid": lambda v: v == "" or _uuid(v),
    "billing_id": lambda v: v == "", "docker": lambda v: v == 0,
    "ram": lambda v: 0 <= v <= MAX_INTEGER, "max_physical_memory": lambda v: 0 <= v <= MAX_INTEGER,
    "state": lambda v: v in _STATES, "create_timestamp": _instant,
    "brand": lambda v: v != "", "alias": lambda v: True, "tags": lambda v: True,
}
