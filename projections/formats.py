"""How values look on the wire: RFC 3339 UTC timestamps with milliseconds (api.md)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime | str | None) -> str | None:
    """``2026-11-30T00:31:11.123Z`` for a timezone-aware datetime (or an ISO string)."""
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
