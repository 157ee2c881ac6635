"""A gap in the log's positions is passed once every transaction that wrote to the event
table when it was seen has ended; a transaction that wrote elsewhere only (an analyst's
temporary table, left open) cannot fill it and does not hold every stream up until the gap
timeout (service/changes/reader.py, ``LogReader._writers``). PostgreSQL only: SQLite has one
writer at a time and no gap that may still fill."""

from __future__ import annotations

import psycopg
import pytest

from service.changes.reader import LogReader
from tests.changes.scenarios import OWNER_A, create_vm, stored_created, unlocked_append


def _read_until_past(reader: LogReader, after: int, wanted: int, reads: int) -> bool:
    """Whether ``reader`` returns position ``wanted`` within ``reads`` reads from ``after``
    (its clock never moves: no read can pass a gap by its timeout)."""
    for _ in range(reads):
        rows, after = reader.read_after(after, 100)
        if any(row.id == wanted for row in rows):
            return True
    return False


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_transaction_that_wrote_elsewhere_does_not_hold_a_gap_open(services, settings):
    recorder = services.app.recorder
    create_vm(services, OWNER_A)
    start = recorder.max_notification_id()
    with psycopg.connect(settings.database_url) as analyst, \
            psycopg.connect(settings.database_url) as writer:
        analyst.execute("CREATE TEMP TABLE scratch (x int)")  # a transaction id, held open
        # An append that rolls back consumes a position: a permanent gap
        writer.execute(f"SELECT nextval(pg_get_serial_sequence("
                       f"'{recorder.events_table_name}', 'notification_id'))")
        writer.rollback()
        create_vm(services, OWNER_A)
        head = recorder.max_notification_id()
        assert head > start + 1
        reader = LogReader(recorder, gap_timeout_s=3600, clock=lambda: 0.0)
        # one read meets the gap, one finds its writers gone, one passes it
        assert _read_until_past(reader, start, head, reads=3)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_gap_stays_open_while_a_transaction_that_wrote_to_the_log_is_open(services,
                                                                            settings):
    recorder = services.app.recorder
    create_vm(services, OWNER_A)
    start = recorder.max_notification_id()
    (_, held), (_, later) = stored_created(services), stored_created(services)
    with psycopg.connect(settings.database_url) as holder:
        # an append in flight, its position drawn, rolled back below: a gap in the end
        unlocked_append(holder, services, held)
        with psycopg.connect(settings.database_url, autocommit=True) as other:
            unlocked_append(other, services, later)
        head = recorder.max_notification_id()
        assert head == start + 2
        reader = LogReader(recorder, gap_timeout_s=3600, clock=lambda: 0.0)
        assert not _read_until_past(reader, start, head, reads=5)
        holder.rollback()
        assert _read_until_past(reader, start, head, reads=3)
