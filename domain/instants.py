"""How an instant is written: RFC 3339 in UTC with milliseconds, ``2026-11-30T00:31:11.123Z``
(api.md). The one formatter of every text that names an instant: the API's and read models'
(``projections.formats`` names it too) and the domain's own (a stuck VM's quarantine reason,
domain/stuck.py), so a reason and the API never write one instant two ways."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

# Read models format the same instants again and again (a VM's creation time in each batch
# that touches it): a pure function, kept for the last few thousand values
# (docs/performance.md, P3). Equal instants have the same text.
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
