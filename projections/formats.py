"""How values look on the wire: RFC 3339 UTC timestamps with milliseconds (api.md), and the
range of integers."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache
from uuid import UUID

# The largest integer a value may be: JSON's exact range (2**53 - 1), inside the database's
# 64-bit integers; a log position never exceeds it.
MAX_INTEGER = 2**53 - 1
# ASCII digits ([0-9], not \d: other scripts' digits), a "-" so that a negative number is
# refused as out of range rather than as no number; no "+", which no API of ours writes
_DECIMAL = re.compile(r"-?[0-9]{1,20}")


def decimal(text: str) -> int | None:
    """``text`` as a decimal integer: ASCII digits, perhaps after a ``-``, at most 20 digits;
    None otherwise. Stricter than ``int``, which also reads "+1", "1_0", surrounding spaces
    and other scripts' digits, and fails on more than 4,300 digits. Every integer a client
    sends (query parameters, ``If-Match``, marker timestamps, ``?after=``) is read by it."""
    return int(text) if _DECIMAL.fullmatch(text) else None


# Read models format the same instants and uuids again and again (a VM's creation time in
# each batch that touches it, an event's timestamp in three read models, a VM's uuid for
# each of its rows): both are pure functions, kept for the last few thousand values
# (docs/performance.md, P3). Equal instants (and equal uuids) have the same text.
_RECENT = 8192


def rfc3339(moment: datetime | str | None) -> str | None:
    """``2026-11-30T00:31:11.123Z`` for a timezone-aware datetime (or an ISO string)."""
    return None if moment is None else _rfc3339(moment)


@lru_cache(maxsize=_RECENT)
def _rfc3339(moment: datetime | str) -> str:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    # isoformat ends in "+00:00" for UTC; it costs half of strftime (docs/performance.md, P3)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


@lru_cache(maxsize=_RECENT)
def uuid_text(value: UUID) -> str:
    """``str(value)``: a ``UUID``'s canonical 36-character form."""
    return str(value)


def parse_iso_instant(text: str) -> datetime | None:
    """``text`` read as an ISO 8601 / RFC 3339 instant (``datetime.fromisoformat``), with
    RFC 3339's lower-case ``t`` and ``z`` (5.6) and ``Z`` for UTC; None when it is not one.
    Naive when ``text`` has no offset: the caller decides what that means.

    None too for an instant that is not one in UTC's calendar: year 1 at ``+01:00`` is year
    0 in UTC, year 9999 at ``-01:00`` year 10000, and converting either to UTC (``rfc3339``,
    a comparison with a stored instant) raised ``OverflowError``. Every instant a client
    sends (a query parameter, a marker) is read by this function, so none gets that far."""
    try:
        moment = datetime.fromisoformat(text.upper())  # 3.11 reads "Z" as UTC
    except ValueError:
        return None
    try:
        if moment.tzinfo is not None:
            moment.astimezone(UTC)
    except OverflowError:
        return None
    return moment
