"""How values look on the wire: RFC 3339 UTC timestamps with milliseconds (api.md; written by
``domain.instants.rfc3339``, which the domain's own texts use too; read by
``parse_iso_instant``, RFC 3339's grammar alone), and the range of integers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from uuid import UUID

# the one formatter of instants, the domain's (a quarantine reason names one); named here too
from domain.instants import in_utc_range, rfc3339

__all__ = ["INSTANT_EXPECTED", "MAX_INTEGER", "GivenInstant", "decimal", "epoch_ms", "in_utc_range",
           "parse_given_instant", "parse_iso_instant", "rfc3339", "uuid_text"]

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


# Read models format the same uuids again and again (a VM's uuid for each of its rows), as
# they do instants (domain.instants): a pure function, kept for the last few thousand values
# (docs/performance.md, P3). Equal uuids have the same text.
_RECENT = 8192

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


# RFC 3339's date-time (5.6), nothing more: "T" and "Z" in either case (its note), a
# fraction after "." of any length, an offset "Z" or "+hh:mm"/"-hh:mm". ISO 8601's other
# forms, which ``datetime.fromisoformat`` also reads, are refused: a "," before the fraction,
# "+hh" or "+hhmm", a space for the "T", no offset, a week date (docs/api.md, "Instants").
_DATE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))")


#: What a refused instant is told (a query parameter's, a body's)
INSTANT_EXPECTED = "must be an RFC 3339 timestamp with a time zone, in years 1 to 9999 in UTC"


def parse_iso_instant(text: str) -> datetime | None:
    """``text`` read as an RFC 3339 ``date-time`` (5.6): an aware ``datetime``, its fraction
    cut to microseconds (floored, as ``rfc3339`` floors); None when it is not one. A leap
    second (``:60``) is None too: ``datetime`` has none. ``-00:00`` (5.3) is UTC.

    None too for an instant that is not one in UTC's calendar (``in_utc_range``): year 1 at
    ``+01:00`` is year 0 in UTC, year 9999 at ``-01:00`` year 10000, and converting either to
    UTC (``rfc3339``, a comparison with a stored instant) raised ``OverflowError``. Every
    instant a client sends (a query parameter, a marker, a body's) is read by this function,
    so none gets that far."""
    given = parse_given_instant(text)
    return None if given is None else given.moment


#: The fraction digits of an instant to the millisecond, as ``rfc3339`` writes them
_MS_DIGITS = 3


@dataclass(frozen=True, slots=True)
class GivenInstant:
    """An instant as a client wrote it (GetVm's and the console's ``?at=``): ``moment``, as
    ``parse_iso_instant`` reads it, and ``digits``, how many fraction digits it gave (0 to 6:
    past the microsecond they are cut)."""

    moment: datetime
    digits: int

    @property
    def fine(self) -> bool:
        """Whether it was given finer than the millisecond: more than 3 fraction digits,
        zeros or not (``.338000Z`` is fine, ``.338Z`` is not). docs/api.md, "Reads": one
        given to the millisecond names every event of that millisecond; a fine one is
        compared to each event's stored timestamp, to the microsecond."""
        return self.digits > _MS_DIGITS

    def __str__(self) -> str:
        """The instant in UTC to the digits it was given, at least the millisecond (as
        ``rfc3339`` writes every instant), at most the microsecond: ``.338001Z`` is said so,
        not as ``.338Z``; ``.3380Z`` as ``.3380Z``, ``.5Z`` as ``.500Z``."""
        whole = self.moment.astimezone(UTC).isoformat(timespec="microseconds")[:-6]
        return whole[:len(whole) - 6 + max(self.digits, _MS_DIGITS)] + "Z"


def parse_given_instant(text: str) -> GivenInstant | None:
    """``text`` read as ``parse_iso_instant`` reads it, keeping how many fraction digits it
    gave (``GivenInstant``); None when it is not an instant. The one reader of the digits,
    so that whether an instant is given finer than the millisecond is decided by its text,
    never by its value (``.338000Z`` is not the millisecond ``.338Z``)."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, sign, off_h, off_m = match.groups()
    try:
        offset = UTC if sign is None else timezone(
            (-1 if sign == "-" else 1) * timedelta(hours=int(off_h), minutes=int(off_m)))
        if sign is not None and int(off_m) > 59:
            return None
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute),
                          int(second), int((fraction or "0")[:6].ljust(6, "0")), offset)
    except ValueError:  # a field out of range (month 13, hour 24, second 60, offset 24:00)
        return None
    return GivenInstant(moment, min(len(fraction or ""), 6)) if in_utc_range(moment) else None
