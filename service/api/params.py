"""Query parameters, validated as VMAPI does (api.md, under "Errors"): an unknown parameter is
refused naming it, malformed UUIDs name their field. ListVms' own are in
``service/api/list_vms_params.py``.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from fastapi import Request

from projections.formats import MAX_INTEGER, decimal, parse_iso_instant
from service.api.auth import scoped_owner
from service.api.errors import ApiError, invalid_parameters
from service.api.vmapi_rules import INVALID_UUID, is_uuid

# Accepted everywhere: read consistency, and the VMAPI client's owner scoping.
COMMON = frozenset({"consistency", "owner_uuid"})
MAX_LIMIT = 1000


class Query:
    """The request's query parameters, checked against the names a route accepts."""

    def __init__(self, request: Request, allowed: Iterable[str], *, prefixes: tuple[str, ...] = (),
                 owner_in_any_case: bool = False, scoped: bool = True):
        self.request = request
        self.params = request.query_params
        self.errors: list[dict[str, str]] = []
        # ``scoped=False``: a route no owner scopes takes no owner_uuid (QueryParameters)
        names = set(allowed) | (COMMON if scoped else COMMON - {"owner_uuid"})
        for name in self.params:
            if name not in names and not name.startswith(prefixes):
                self.invalid(name, "Invalid parameter")
        consistency = self.params.get("consistency")
        if consistency not in (None, "strong", "eventual"):
            self.invalid("consistency", "must be strong or eventual")
        # Every route scopes by owner_uuid the same way: a malformed one names its field.
        # An owner token is always scoped to its own owner (auth.scoped_owner). The
        # changefeed takes its uuids in any case (``owner_in_any_case``; docs/api.md).
        asked = None
        if scoped:
            asked = (self.uuid_in_any_case("owner_uuid") if owner_in_any_case
                     else self.uuid("owner_uuid"))
        self.owner_uuid = scoped_owner(request, asked)

    def invalid(self, field: str, message: str, code: str = "Invalid") -> None:
        self.errors.append({"field": field, "code": code, "message": message})

    def check(self) -> None:
        """Raise the ``ValidationFailed`` error if any parameter was refused."""
        if self.errors:
            raise invalid_parameters(self.request, self.errors)

    def conflicting(self, first: str, second: str, *, refused: str) -> ApiError:
        """The error for parameters ``first`` and ``second`` given together, where the one
        would silently win over the other and VMAPI has no such pair (``version`` with
        ``at``, ``task`` with ``name``; ListVms' ``offset`` with ``marker`` has VMAPI's own
        shape): top-level ``ConflictingParameters``, one ``Invalid`` error naming
        ``refused``, both saying "FIRST and SECOND cannot be used together" (api.md,
        "Contract: errors"). Returned for the caller to raise."""
        message = f"{first} and {second} cannot be used together"
        return invalid_parameters(
            self.request, [{"field": refused, "code": "Invalid", "message": message}],
            code="ConflictingParameters", message=message)

    def text(self, name: str, max_length: int = 256) -> str | None:
        value = self.params.get(name)
        if value is not None and (not value or len(value) > max_length):
            self.invalid(name, f"must be 1 to {max_length} characters")
            return None
        return value

    def uuid_in_any_case(self, name: str) -> str | None:
        """Parameter ``name`` as a uuid in lower case, given in any case (the changefeed's
        filters, where the VMAPI routes take VMAPI's lower case only: ``uuid``)."""
        value = self.params.get(name)
        if value is None:
            return None
        try:
            return str(uuidlib.UUID(value))
        except ValueError:
            self.invalid(name, INVALID_UUID)
            return None

    def uuid(self, name: str) -> str | None:
        value = self.params.get(name)
        if value is None:
            return None
        if not is_uuid(value):  # VMAPI's rule, a body's too (service/api/vmapi_rules.py)
            self.invalid(name, INVALID_UUID)
            return None
        return value

    def integer(self, name: str, *, minimum: int, maximum: int = MAX_INTEGER) -> int | None:
        """An integer from ``minimum`` to ``maximum`` (at most ``MAX_INTEGER``: every number
        that reaches the database fits its 64-bit integers, and JSON's exact range)."""
        return integer_param(self.params, name, minimum=minimum, maximum=maximum,
                             refuse=self.invalid, message=integer_refusal(minimum, maximum))

    def boolean(self, name: str) -> bool:
        value = self.params.get(name)
        if value is None:
            return False
        if value.lower() in ("true", "1"):
            return True
        if value.lower() not in ("false", "0"):
            self.invalid(name, "must be true or false")
        return False

    @property
    def eventual(self) -> bool:
        """Whether the client asked to skip the read-your-writes wait."""
        return self.params.get("consistency") == "eventual"


# An integer however long: ``decimal`` reads at most 20 digits (int() of thousands is slow)
_INTEGER = re.compile(r"-?[0-9]+")
#: The most digits an integer a client sends may have (``projections.formats.decimal``'s).
MAX_DIGITS = 20
#: The refusal of an integer of more digits whose value, its leading zeros aside, is in reach:
#: the range is no answer to "00…01" (found by a tester: ``older_than=0…01``, 26 digits, was
#: "must be 0 to 1000000000"). Every integer parameter and header gives it.
TOO_MANY_DIGITS = f"must have at most {MAX_DIGITS} digits (leading zeros count)"


def integer_param(params: Mapping[str, str], name: str, *, minimum: int, maximum: int,
                  refuse: Callable[[str, str], None],
                  message: Callable[[int | None], str]) -> int | None:
    """The query parameter ``name`` as an integer from ``minimum`` to ``maximum``; None
    when absent, or when it is not such an integer: then ``refuse(name, message(number))``,
    with the number read (None: not an integer), so each caller words its own refusal
    (``Query.integer``; ListVms' in VMAPI's words, service/api/list_vms_params.py). An
    integer of more than ``MAX_DIGITS`` digits is out of range when its value is (the
    caller's refusal), and otherwise ``TOO_MANY_DIGITS``, whoever the caller."""
    value = params.get(name)
    if value is None:
        return None
    number = decimal(value)
    if number is None and _INTEGER.fullmatch(value):
        if len(value.lstrip("-").lstrip("0")) <= MAX_DIGITS:  # leading zeros made it long
            refuse(name, TOO_MANY_DIGITS)
            return None
        number = minimum - 1 if value.startswith("-") else maximum + 1  # beyond any range
    if number is None or not minimum <= number <= maximum:
        refuse(name, message(number))
        return None
    return number


def integer_refusal(minimum: int, maximum: int) -> Callable[[int | None], str]:
    """The refusal of a parameter that is not an integer from ``minimum`` to ``maximum``,
    given the number read (None: not an integer), for ``integer_param``."""
    return lambda number: "must be an integer" if number is None else out_of_range(
        minimum, maximum)


def out_of_range(minimum: int, maximum: int) -> str:
    """The refusal of a number outside ``minimum`` to ``maximum``, in the same words wherever
    it is given (``?version=``, ``If-Match``)."""
    return f"must be {minimum} to {maximum}"


# A version header: W/"7", "7" or 7 (a "-" only to be refused as out of range, in
# ?version='s words)
_ENTITY_TAG = re.compile(r'(?:W/)?"(-?[0-9]+)"|(-?[0-9]+)')


def header_version(request: Request, name: str, text: str) -> int:
    """The version header ``name`` names (``7``, ``"7"`` or ``W/"7"``: decimal digits, 1 to
    ``MAX_INTEGER`` as ``?version=``); anything else raises ``ValidationFailed`` naming it.
    ``int`` took what no version is: 0, negative numbers and numbers past any version (412,
    "not -1"), "7_0" or " 7" inside the quotes, and "+7", W/7 or quotes not in one pair."""
    refused: list[str] = []
    # exactly one quoted string (perhaps weak) or bare digits: stripping quotes and "W/" in
    # any number read "+5", '"""5"""', "W/5" and an unbalanced '"5' as version 5
    match = _ENTITY_TAG.fullmatch(text.strip())
    unquoted = "" if match is None else match.group(1) or match.group(2)
    version = integer_param(
        {name: unquoted}, name, minimum=1, maximum=MAX_INTEGER,
        refuse=lambda _name, message: refused.append(message),
        message=lambda number: 'must be a version, e.g. "7", or *' if number is None
        else out_of_range(1, MAX_INTEGER))
    if version is None:
        raise invalid_parameters(request, [{"field": name, "code": "Invalid",
                                            "message": refused[0]}])
    return version


def parse_timestamp(text: str) -> datetime | None:
    """An instant given as VMAPI takes one (ListVms' ``create_timestamp``, a marker's):
    milliseconds since the epoch, or an RFC 3339 ``date-time`` (``parse_iso_instant``, with
    its time zone, as every instant the API reads); None otherwise."""
    try:
        millis = decimal(text)  # not int(): it reads "+5", "5_0" and " 5"
        if millis is not None:
            return datetime.fromtimestamp(millis / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        pass
    return parse_iso_instant(text)
