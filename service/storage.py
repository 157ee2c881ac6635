"""The event store: the ``eventsourcing`` recorders, extended with a stream read that keeps
each event's global position (for ``GET /vms/{uuid}/history``).

Selected by ``Settings.eventsourcing_env`` through ``APPLICATION_RECORDER_TOPIC``.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from typing import Any

from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder
from psycopg.sql import SQL, Identifier

from projections.db import Dialect
from service.idempotency import insert_in_recorder


class SQLiteLedgerRecorder(SQLiteApplicationRecorder):
    """SQLite event store; notification ids are the table's rowids."""

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
                       ) -> Sequence[int] | None:
        ids = super()._insert_events(c, stored_events, **kwargs)
        insert_in_recorder(c, Dialect.SQLITE, kwargs)
        return ids

    def select_stream(self, originator_id: UUID, after_version: int, limit: int) -> list[Notification]:
        """Events of one stream after ``after_version``, oldest first, with positions."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT rowid, originator_version, topic, state FROM {self.events_table_name} "
                "WHERE originator_id = ? AND originator_version > ? "
                "ORDER BY originator_version LIMIT ?",
                (originator_id.hex, after_version, limit),
            )
            return [
                Notification(
                    id=row["rowid"],
                    originator_id=originator_id,
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=row["state"],
                )
                for row in c.fetchall()
            ]


class PostgresLedgerRecorder(PostgresApplicationRecorder):
    """PostgreSQL event store (the library's gap-free insert under a table lock)."""

    def _insert_events(self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
                       ) -> None:
        # Runs in the same transaction as the events' insert, before it.
        insert_in_recorder(curs, Dialect.POSTGRES, kwargs)

    def select_stream(self, originator_id: UUID, after_version: int, limit: int) -> list[Notification]:
        """Events of one stream after ``after_version``, oldest first, with positions."""
        statement = SQL(
            "SELECT notification_id, originator_version, topic, state FROM {schema}.{table} "
            "WHERE originator_id = %s AND originator_version > %s "
            "ORDER BY originator_version LIMIT %s"
        ).format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(statement, (originator_id, after_version, limit))
            return [
                Notification(
                    id=row["notification_id"],
                    originator_id=originator_id,
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]


def select_stream(recorder: object, originator_id: UUID, after_version: int, limit: int) -> Sequence[Notification]:
    """Dispatch to whichever ledger recorder the application was built with."""
    assert isinstance(recorder, SQLiteLedgerRecorder | PostgresLedgerRecorder), recorder
    return recorder.select_stream(originator_id, after_version, limit)
