"""A command that only reads the log (``changes``, ``history``, ``audit verify``) runs no DDL
over tables that are all there and current: found by a tester, ``vmledger changes`` began with
the event store's ``CREATE UNIQUE INDEX IF NOT EXISTS``, which waits for every transaction
writing to the events table, so with an append left open it failed on the lock timeout
before reading anything (and queued the appends after it behind its wait)."""

from __future__ import annotations

from typing import Any

from service.container import Services


def _an_open_append(services: Services) -> Any:
    """A transaction that has written to the events table and stays open; close it."""
    table = services.app.recorder.events_table_name
    datastore = services.app.recorder.datastore
    if services.settings.backend == "postgres":
        connection = datastore.pool.getconn()
        connection.execute("BEGIN")  # the library's connections are in autocommit
        connection.execute(f"INSERT INTO {table} (originator_id, originator_version, topic, "
                           "state) SELECT gen_random_uuid(), 1, topic, state "
                           f"FROM {table} LIMIT 1")
        return lambda: (connection.execute("ROLLBACK"), datastore.pool.putconn(connection))
    import sqlite3

    path = services.settings.database_url.removeprefix("sqlite:///")
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
    connection.execute(f"INSERT INTO {table} (originator_id, originator_version, topic, "
                       f"state) SELECT 'x', 1, topic, state FROM {table} LIMIT 1")
    return lambda: (connection.execute("ROLLBACK"), connection.close())


def test_a_reading_command_starts_beside_an_open_append(services, settings):
    services.commands.head_position()  # the tables exist, with a fleet's events
    settings.postgres_lock_timeout_s = 1
    close = _an_open_append(services)
    try:
        reader = Services.build(settings, register_fleet=False, reads_only=True)
        try:
            assert reader.projections.head() == services.projections.head()
        finally:
            reader.close()
    finally:
        close()
