"""How values look on the wire: RFC 3339 UTC timestamps with milliseconds (api.md; written by
``domain.instants.rfc3339``, which the domain's own texts use too), and the range of
integers."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from uuid import UUID

# the one formatter of instants, the domain's (a quarantine reason names one); named here too
from domain.instants import in_utc_range, rfc3339

__all__ = ["MAX_INTEGER", "decimal", "epoch_ms", "in_utc_range", "parse_iso_instant",
           "rfc3339", "uuid_text"]

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
