"""The event store: the ``eventsourcing`` recorders, extended with a group commit (SQLite's
here, PostgreSQL's in service/group_commit.py), a stream read that keeps each event's global
position (for ``GET /vms/{uuid}/history``), a read of the versions of a stream's events of
some topics (the console's quarantines, service/audit/history.py), and a wake-up on other processes' appends (the
bounds on every wait for the database are in service/db_limits.py).

Selected by ``Settings.eventsourcing_env`` through ``APPLICATION_RECORDER_TOPIC``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    Notification,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder
from eventsourcing.utils import retry
from psycopg.sql import SQL, Identifier

from projections.db import Dialect, Tx
from service.commands.idempotency import insert_in_recorder
from service.group_commit import Append, Outcome, PostgresGroupCommit
from service.storage_statements import AppendStatements, StreamReads

log = logging.getLogger(f"vmledger.{__name__}")


class SQLiteLedgerRecorder(SQLiteApplicationRecorder):
    """SQLite event store; notification ids are the table's rowids."""

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
                       ) -> Sequence[int] | None:
        ids = super()._insert_events(c, stored_events, **kwargs)
        insert_in_recorder(c, Dialect.SQLITE, kwargs)
        return ids

    def insert_batch(self, appends: Sequence[Append]) -> list[Outcome]:
        """Group commit: every append of ``appends`` in ONE transaction, each under its own
        savepoint, so an append that conflicts (a stream's version, or an idempotency key,
        already taken) is rolled back alone and the others commit. Returns one outcome per
        append, in order. Raises the library's errors for anything else (nothing committed).
        """
        outcomes: list[Outcome] = []
        with self.datastore.transaction(commit=True) as c:
            for stored_events, kwargs in appends:
                c.execute("SAVEPOINT append")
                try:
                    outcomes.append(self._insert_events(c, stored_events, **kwargs) or [])
                except sqlite3.IntegrityError as error:
                    c.execute("ROLLBACK TO SAVEPOINT append")
                    conflict = IntegrityError(error)
                    conflict.__cause__ = error
                    outcomes.append(conflict)
                c.execute("RELEASE SAVEPOINT append")
        return outcomes

    def select_stream(self, originator_id: UUID, after_version: int, limit: int) -> list[Notification]:
        """Events of one stream after ``after_version``, oldest first, with positions."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT rowid AS id, originator_version, topic, state "
                f"FROM {self.events_table_name} "
                "WHERE originator_id = ? AND originator_version > ? "
                "ORDER BY originator_version LIMIT ?",
                (originator_id.hex, after_version, limit),
            )
            return _stream_notifications(originator_id, c.fetchall())

    def select_versions(self, originator_id: UUID, topics: Sequence[str], up_to_version: int
                        ) -> list[tuple[int, str]]:
        """``(version, topic)`` of one stream's events of ``topics`` up to ``up_to_version``,
        oldest first; nothing decoded."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT originator_version, topic FROM {self.events_table_name} "
                "WHERE originator_id = ? AND originator_version <= ? "
                f"AND topic IN ({', '.join('?' * len(topics))}) ORDER BY originator_version",
                (originator_id.hex, up_to_version, *topics),
            )
            return [(row["originator_version"], row["topic"]) for row in c.fetchall()]

    def select_outside(self) -> list[Notification]:
        """The events at positions outside the log (0 or below), in position order."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT rowid AS id, originator_id, originator_version, topic, state "
                      f"FROM {self.events_table_name} WHERE rowid < 1 ORDER BY rowid")
            return [_notification(UUID(row["originator_id"]), row) for row in c.fetchall()]

    def select_present(self, originator_ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``originator_ids`` whose stream has events; nothing decoded."""
        with self.datastore.transaction(commit=False) as c:
            present = set()
            for originator_id in originator_ids:  # a local file: no round trip to save
                c.execute(f"SELECT 1 FROM {self.events_table_name} "
                          "WHERE originator_id = ? LIMIT 1", (originator_id.hex,))
                if c.fetchone() is not None:
                    present.add(originator_id)
            return present


class PostgresLedgerRecorder(PostgresApplicationRecorder):
    """PostgreSQL event store (the library's gap-free insert under a table lock)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group_commit = PostgresGroupCommit(self.datastore, AppendStatements(self))
        self._stream_reads = StreamReads(self)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def select_events(self, originator_id: UUID | str, *, gt: int | None = None,
                      lte: int | None = None, desc: bool = False, limit: int | None = None
                      ) -> Sequence[StoredEvent]:
        """The library's stream read (service/storage_statements.py, ``StreamReads``)."""
        return self._stream_reads.select(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any
                      ) -> Sequence[int] | None:
        """The library's insert, as a group commit of one append (``insert_batch``): the
        same statements under the same table lock, ``COMMIT`` sent in the same query as the
        ``INSERT``. The library waits for the ``INSERT``'s result before it sends ``COMMIT``,
        so the lock that serializes every append was held across a round trip to this
        process (docs/performance.md, P1). A conflicting append raises ``IntegrityError``
        and commits nothing, the idempotency key included (tests/service/test_storage.py).
        The service's own writers append through the committer; this serves the library's
        callers of ``Application.save``; ``insert_batch`` retries what the library would."""
        (outcome,) = self.insert_batch([(stored_events, kwargs)])
        if isinstance(outcome, IntegrityError):
            raise outcome
        return outcome

    def insert_batch(self, appends: Sequence[Append]) -> list[Outcome]:
        """Group commit: every append of ``appends`` in ONE transaction, under ONE table
        lock, an append that conflicts failing alone; one outcome per append, in order
        (``service.group_commit.PostgresGroupCommit.insert_batch``)."""
        return self.group_commit.insert_batch(appends)

    def submit_notifications(self, tx: Tx, after: int, limit: int
                             ) -> Callable[[], list[Notification]]:
        """``select_notifications(after, limit, inclusive_of_start=False)`` sent in ``tx``, a
        read models' transaction (``projections.live``: docs/performance.md, P5)."""
        answer = tx.submit(
            f"SELECT notification_id AS id, originator_id, originator_version, topic, state "
            f"FROM {Identifier(self.datastore.schema, self.events_table_name).as_string()} "
            "WHERE notification_id > ? ORDER BY notification_id LIMIT ?", [after, limit])
        return lambda: [_notification(row["originator_id"], row) for row in answer()]

    def select_stream(self, originator_id: UUID, after_version: int, limit: int) -> list[Notification]:
        """Events of one stream after ``after_version``, oldest first, with positions."""
        return _stream_notifications(originator_id, self._rows(
            "SELECT notification_id AS id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE originator_id = %s AND originator_version > %s "
            "ORDER BY originator_version LIMIT %s", (originator_id, after_version, limit)))

    def select_versions(self, originator_id: UUID, topics: Sequence[str], up_to_version: int
                        ) -> list[tuple[int, str]]:
        """``(version, topic)`` of one stream's events of ``topics`` up to ``up_to_version``,
        oldest first; nothing decoded."""
        rows = self._rows(
            "SELECT originator_version, topic FROM {schema}.{table} WHERE originator_id = %s "
            "AND originator_version <= %s AND topic = ANY(%s) ORDER BY originator_version",
            (originator_id, up_to_version, list(topics)))
        return [(row["originator_version"], row["topic"]) for row in rows]

    def select_outside(self) -> list[Notification]:
        """The events at positions outside the log (0 or below), in position order."""
        rows = self._rows(
            "SELECT notification_id AS id, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE notification_id < 1 ORDER BY notification_id", ())
        return [_notification(row["originator_id"], row) for row in rows]

    def select_present(self, originator_ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``originator_ids`` whose stream has events, in one query; nothing
        decoded (a stream's first row by the primary key, however long the stream)."""
        rows = self._rows(
            "SELECT id FROM unnest(%s::uuid[]) AS id WHERE EXISTS "
            "(SELECT 1 FROM {schema}.{table} WHERE originator_id = id)",
            (list(originator_ids),))
        return {row["id"] for row in rows}

    def _rows(self, query: str, parameters: Sequence[Any]) -> list[Any]:
        """The rows of ``query`` (``{schema}.{table}`` naming the events table), read in a
        transaction of its own."""
        statement = SQL(query).format(  # type: ignore[arg-type]
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name))
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(statement, parameters)
            return curs.fetchall()


def _stream_notifications(originator_id: UUID, rows: Sequence[Any]) -> list[Notification]:
    """The rows of ``select_stream``, either backend's, as notifications."""
    return [_notification(originator_id, row) for row in rows]


def _notification(originator_id: UUID, row: Any) -> Notification:
    """A row (``id``, ``originator_version``, ``topic``, ``state``) as a notification. A
    state of another type than bytes (text, written by an edit behind the service's back) is
    kept as it is, for the mapper to refuse as unreadable (``checked_mapper.wrong_type``):
    ``bytes()`` of it raised a bare ``TypeError`` (auditor tester)."""
    state = row["state"]
    return Notification(id=row["id"], originator_id=originator_id,
                        originator_version=row["originator_version"], topic=row["topic"],
                        state=bytes(state) if isinstance(state, memoryview) else state)


def select_stream(recorder: object, originator_id: UUID, after_version: int, limit: int) -> Sequence[Notification]:
    """Dispatch to whichever ledger recorder the application was built with."""
    assert isinstance(recorder, SQLiteLedgerRecorder | PostgresLedgerRecorder), recorder
    return recorder.select_stream(originator_id, after_version, limit)


def select_versions(recorder: object, originator_id: UUID, topics: Sequence[str],
                    up_to_version: int) -> list[tuple[int, str]]:
    """``(version, topic)`` of one stream's events of ``topics`` up to ``up_to_version``,
    oldest first, from whichever ledger recorder the application was built with: a read of
    the stream's rows by key that decodes no event."""
    assert isinstance(recorder, SQLiteLedgerRecorder | PostgresLedgerRecorder), recorder
    return recorder.select_versions(originator_id, topics, up_to_version)


def select_present(recorder: object, originator_ids: Sequence[UUID]) -> set[UUID]:
    """Those of ``originator_ids`` whose stream has events, from whichever ledger recorder
    the application was built with: which of several aggregates exist, in one read rather
    than a load of each."""
    assert isinstance(recorder, SQLiteLedgerRecorder | PostgresLedgerRecorder), recorder
    return recorder.select_present(originator_ids)


def select_outside(recorder: object) -> list[Notification]:
    """The events stored at log positions outside the log (0 or below: its positions start
    at 1), which no read of the log by position returns; moved there behind the service's
    back (``vmledger audit verify`` names them)."""
    assert isinstance(recorder, SQLiteLedgerRecorder | PostgresLedgerRecorder), recorder
    return recorder.select_outside()
