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


def test_an_instant_utc_cannot_write_is_no_instant_on_input_and_the_nearest_on_output():
    from projections.formats import parse_iso_instant

    for text, nearest in (("9999-12-31T23:59:59-01:00", "9999-12-31T23:59:59.999Z"),
                          ("0001-01-01T00:00:00+00:01", "0001-01-01T00:00:00.000Z")):
        assert parse_iso_instant(text) is None
        assert rfc3339(datetime.fromisoformat(text)) == nearest
    assert parse_iso_instant("9999-12-31T23:59:59+01:00") is not None
