"""How values look on the wire: RFC 3339 UTC timestamps with milliseconds (api.md)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime | str | None) -> str | None:
    """``2026-11-30T00:31:11.123Z`` for a timezone-aware datetime (or an ISO string)."""
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    # isoformat ends in "+00:00" for UTC; it costs half of strftime (docs/performance.md, P3)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
