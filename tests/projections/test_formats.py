"""Timestamps on the wire: RFC 3339 in UTC with milliseconds, truncated (api.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from projections.formats import rfc3339


def test_a_moment_in_any_zone_is_written_in_utc_with_milliseconds_truncated():
    moment = datetime(2026, 11, 30, 2, 31, 11, 123_999, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(moment) == "2026-11-30T00:31:11.123Z"


def test_whole_seconds_keep_three_digits_and_strings_and_none_pass_through():
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000Z"
    assert rfc3339("2026-01-02T03:04:05.5+00:00") == "2026-01-02T03:04:05.500Z"
    assert rfc3339(None) is None
