"""How values look on the wire: RFC 3339 UTC timestamps with milliseconds (api.md), and the
range of integers."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
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


# The instants UTC can write: an aware datetime of year 1 to 9999 in its own zone may still
# fall outside them (9999-12-31T23:59:59-01:00 is in year 10000 in UTC).
_FIRST_UTC = datetime.min.replace(tzinfo=UTC)
_LAST_UTC = datetime.max.replace(tzinfo=UTC)


def in_utc_range(moment: datetime) -> bool:
    """Whether ``moment`` (timezone-aware) can be written in UTC: years 1 to 9999 there. Every
    instant a client gives is checked with it where it comes in (docs/api.md, "Errors")."""
    return _FIRST_UTC <= moment <= _LAST_UTC  # aware comparisons do not overflow


def rfc3339(moment: datetime | str | None) -> str | None:
    """``2026-11-30T00:31:11.123Z`` for a timezone-aware datetime (or an ISO string). One UTC
    cannot carry (``in_utc_range``; only an event stored before input was checked holds one)
    is written as the nearest instant it can, so that no reader of the log fails on it."""
    return None if moment is None else _rfc3339(moment)


@lru_cache(maxsize=_RECENT)
def _rfc3339(moment: datetime | str) -> str:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    moment = min(max(moment, _FIRST_UTC), _LAST_UTC)
    # isoformat ends in "+00:00" for UTC; it costs half of strftime (docs/performance.md, P3)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(moment: datetime) -> int:
    """Whole milliseconds since the Unix epoch of a timezone-aware ``moment`` (floored, as
    ``rfc3339`` floors its text: the two forms agree)."""
    return (moment - _EPOCH) // _MS


@lru_cache(maxsize=_RECENT)
def uuid_text(value: UUID) -> str:
    """``str(value)``: a ``UUID``'s canonical 36-character form."""
    return str(value)


def parse_iso_instant(text: str) -> datetime | None:
    """``text`` read as an ISO 8601 / RFC 3339 instant (``datetime.fromisoformat``), with
    RFC 3339's lower-case ``t`` and ``z`` (5.6) and ``Z`` for UTC; None when it is not one.
    Naive when ``text`` has no offset: the caller decides what that means.

    None too for an instant that is not one in UTC's calendar (``in_utc_range``): year 1 at
    ``+01:00`` is year 0 in UTC, year 9999 at ``-01:00`` year 10000, and converting either to
    UTC (``rfc3339``, a comparison with a stored instant) raised ``OverflowError``. Every
    instant a client sends (a query parameter, a marker) is read by this function, so none
    gets that far."""
    try:
        moment = datetime.fromisoformat(text.upper())  # 3.11 reads "Z" as UTC
    except ValueError:
        return None
    return moment if moment.tzinfo is None or in_utc_range(moment) else None
