"""The event store: the ``eventsourcing`` recorders, extended with a stream read that keeps
each event's global position (for ``GET /vms/{uuid}/history``), and a wake-up on other
processes' appends (the bounds on every wait for the database are in service/db_limits.py).

Selected by ``Settings.eventsourcing_env`` through ``APPLICATION_RECORDER_TOPIC``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
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
from service.storage_statements import AppendStatements, StreamReads

log = logging.getLogger(f"vmledger.{__name__}")

# One append of a group commit: its stored events and ``app.save``'s keyword arguments.
Append = tuple[Sequence[StoredEvent], dict[str, Any]]
# What became of it: its events' notification ids, or the IntegrityError it alone met.
Outcome = Sequence[int] | IntegrityError
# A batch's events go in one query's INSERT up to this many (a few hundred KB of text); a
# larger batch, rare (the committer takes 128 appends at most), goes an append an INSERT.
_INSERTED_TOGETHER_UP_TO = 4_096


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


class PostgresLedgerRecorder(PostgresApplicationRecorder):
    """PostgreSQL event store (the library's gap-free insert under a table lock)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._append_sql = AppendStatements(self)
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
        lock, with ONE ``NOTIFY`` and ONE WAL flush; an append that conflicts (a stream's
        version, or an idempotency key, already taken) fails alone and the others commit.
        Returns one outcome per append, in order; their notification ids are consecutive in
        the order given, as one insert's are.

        Every statement, ``COMMIT`` included, goes in one query: one round trip while the
        lock is held when nothing conflicts. It inserts every append's events with one
        ``INSERT`` and has no savepoints (a batch almost never conflicts). When anything in
        it conflicts, the transaction is rolled back and the appends are sent again in one
        pipeline flush, each with its own ``INSERT`` under its own savepoint: a conflict
        among those rolls back its savepoint, and the appends after it are sent again in the
        same transaction (docs/performance.md, "Group commit"). Anything but a conflict
        rolls the whole transaction back and raises the library's error.

        A lost connection (or a wait past its bound, which closes the connection) is retried,
        10 attempts 0.2 s apart, as the library retries its insert. The error may have come
        after ``COMMIT`` was applied, its answer lost: so a retry first takes the table lock,
        which waits for any earlier attempt still running, and looks for this batch's events
        as it wrote them (``_landed``). Found, they are the answer, and nothing is appended
        twice (a job's step recorded twice, a command answered as a conflict with itself).
        """
        if self.datastore.enable_db_functions:  # pragma: no cover - vmledger never enables it
            raise NotImplementedError("group commit needs the table lock, not db functions")
        tried = False

        @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
        def attempt() -> list[Outcome]:
            nonlocal tried
            look_first, tried = tried, True
            return self._insert_batch(appends, look_first=look_first)

        return attempt()

    def _insert_batch(self, appends: Sequence[Append], *, look_first: bool) -> list[Outcome]:
        """One attempt of ``insert_batch``; with ``look_first``, its answer is the batch's
        outcomes as an earlier attempt committed them, if it did (``_landed``)."""
        outcomes: list[Outcome | None] = [None] * len(appends)
        todo = list(range(len(appends)))
        with self.datastore.get_connection() as conn:
            # No statement may be prepared in a flush a conflict can abort: psycopg would
            # take a skipped PREPARE for done ("prepared statement ... does not exist" on
            # the connection's next use).
            threshold, conn.prepare_threshold = conn.prepare_threshold, None
            try:
                begin = True
                events = [event for stored_events, _ in appends for event in stored_events]
                if look_first:
                    for statement in self._append_sql.opening:
                        conn.execute(statement)
                    landed = self._landed(conn, appends)
                    if landed is not None:
                        conn.execute("ROLLBACK")
                        return landed
                    begin = False  # the lock held: sent under savepoints in this transaction
                elif 0 < len(events) <= _INSERTED_TOGETHER_UP_TO:
                    written = self._send_together(conn, appends, events)
                    if written is not None:
                        return written
                    conn.execute("ROLLBACK")  # nothing of that query stays
                while todo:
                    done, failed = self._send_appends(conn, appends, todo, begin=begin)
                    for index, ids in done:
                        outcomes[index] = ids
                    if failed is None:
                        break
                    index, conflict = failed
                    outcomes[index] = conflict
                    conn.execute("ROLLBACK TO SAVEPOINT append")
                    todo = todo[todo.index(index) + 1:]
                    begin = False
                    if not todo:
                        conn.execute("COMMIT")
            except BaseException:
                # Not on a closed connection (a bounded wait ran out: BoundedConnection closes
                # it): its ROLLBACK would raise over the error that says why.
                if conn.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS,
                                                    psycopg.pq.TransactionStatus.INERROR):
                    conn.execute("ROLLBACK")
                raise
            finally:
                conn.prepare_threshold = threshold
        return outcomes  # type: ignore[return-value] - every slot was filled

    def _landed(self, conn: Any, appends: Sequence[Append]) -> list[Outcome] | None:
        """The outcomes of ``appends`` as an earlier attempt of their batch committed them, or
        None when it did not: an append whose every event is stored with the very state it
        holds landed (a state holds its hash-chain link, so no other writer's event matches);
        when one did, the batch committed, and an append that did not land had conflicted
        in it, alone. Batches hold no empty append (``Committer.submit`` settles those)."""
        keys = [(event.originator_id, event.originator_version)
                for stored_events, _ in appends for event in stored_events]
        rows = conn.execute(self._append_sql.landed, ([str(i) for i, _ in keys],
                                                      [v for _, v in keys])).fetchall()
        stored = {(str(row["originator_id"]), row["originator_version"]):
                  (row["notification_id"], bytes(row["state"])) for row in rows}
        outcomes: list[Outcome] = []
        for stored_events, _ in appends:
            found = [stored.get((str(event.originator_id), event.originator_version))
                     for event in stored_events]
            if all(row is not None and row[1] == event.state
                   for row, event in zip(found, stored_events)):
                outcomes.append(sorted(row[0] for row in found))  # type: ignore[index]
            else:
                outcomes.append(IntegrityError(
                    "conflicted in an earlier attempt of its batch, whose answer was lost"))
        return outcomes if any(not isinstance(o, IntegrityError) for o in outcomes) else None

    def _send_together(self, conn: Any, appends: Sequence[Append],
                       events: Sequence[StoredEvent]) -> list[Outcome] | None:
        """One query of many statements: ``BEGIN``, the lock, each append's idempotency
        record, one ``INSERT`` of ``events`` (every append's, in order) and ``COMMIT``, as
        text (psycopg's ``ClientCursor`` binds the parameters), so the whole batch is one
        call into psycopg: in a pipeline each statement was Python of its own, about half of
        the batch's. Returns each append's notification ids when it committed, or None when
        something conflicted (the transaction then open, and aborted)."""
        cursor = psycopg.ClientCursor(conn)
        rendered = _Rendered(cursor)
        for _, kwargs in appends:
            insert_in_recorder(rendered, Dialect.POSTGRES, kwargs)
        statements = [*self._append_sql.opening, *rendered.statements,
                      self._append_sql.insert_text(cursor, events), "COMMIT"]
        with cursor:
            try:
                cursor.execute(";\n".join(statements))  # no parameters: taken as it is
            except psycopg.errors.IntegrityError:
                return None
            for _ in statements[:-2]:  # each statement's result comes in turn: the INSERT's
                cursor.nextset()
            ids = sorted(row["notification_id"] for row in cursor.fetchall())
        outcomes: list[Outcome] = []
        for stored_events, _ in appends:  # ids are given in the order the rows were listed
            outcomes.append(ids[:len(stored_events)])
            ids = ids[len(stored_events):]
        return outcomes

    def _send_appends(self, conn: Any, appends: Sequence[Append], todo: list[int], *,
                      begin: bool
                      ) -> tuple[list[tuple[int, list[int]]], tuple[int, IntegrityError] | None]:
        """One pipeline flush of the appends ``todo``, each under a savepoint (``BEGIN`` and
        the lock first if ``begin``), and ``COMMIT``. Returns the notification ids of each
        append written before the first that conflicted, and that one's index and
        ``IntegrityError`` (the transaction then open, and aborted), or None when all
        committed."""
        inserts = []
        error: Exception | None = None
        with conn.pipeline() as pipeline:
            try:
                with conn.cursor() as curs:
                    if begin:
                        for statement in self._append_sql.opening:
                            curs.execute(statement)
                    for index in todo:
                        # Listed first: an error may come back while this append is sent.
                        insert = conn.cursor()
                        inserts.append((index, insert))
                        stored_events, kwargs = appends[index]
                        curs.execute("SAVEPOINT append")
                        insert_in_recorder(curs, Dialect.POSTGRES, kwargs)
                        self._append_sql.insert(insert, stored_events)
                        curs.execute("RELEASE SAVEPOINT append")
                    curs.execute("COMMIT")
                pipeline.sync()
            except psycopg.errors.IntegrityError as e:  # raised below, outside the pipeline
                error = e
                _drain(pipeline)
        written: list[tuple[int, list[int]]] = []
        for index, insert in inserts:
            result = insert.pgresult
            if result is None or result.status != psycopg.pq.ExecStatus.TUPLES_OK:
                if error is None:  # pragma: no cover - psycopg reported no error
                    raise AssertionError("an append produced no ids and no error")
                conflict = IntegrityError(error)
                conflict.__cause__ = error
                return written, (index, conflict)
            written.append((index, sorted(row["notification_id"] for row in insert.fetchall())))
        if error is not None:  # pragma: no cover - the error came from no append
            raise error
        return written, None

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
        statement = SQL(
            "SELECT notification_id AS id, originator_version, topic, state "
            "FROM {schema}.{table} "
            "WHERE originator_id = %s AND originator_version > %s "
            "ORDER BY originator_version LIMIT %s"
        ).format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(statement, (originator_id, after_version, limit))
            return _stream_notifications(originator_id, curs.fetchall())


class _Rendered:
    """A cursor for ``insert_in_recorder`` that sends nothing: each statement it is given is
    kept as text, its parameters bound by ``cursor`` (a ``psycopg.ClientCursor``)."""

    def __init__(self, cursor: psycopg.ClientCursor[Any]):
        self._cursor = cursor
        self.statements: list[str] = []

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        self.statements.append(self._cursor.mogrify(statement, params))


def _stream_notifications(originator_id: UUID, rows: Sequence[Any]) -> list[Notification]:
    """The rows of ``select_stream``, either backend's, as notifications."""
    return [_notification(originator_id, row) for row in rows]


def _notification(originator_id: UUID, row: Any) -> Notification:
    """A row (``id``, ``originator_version``, ``topic``, ``state``) as a notification."""
    return Notification(id=row["id"], originator_id=originator_id,
                        originator_version=row["originator_version"], topic=row["topic"],
                        state=bytes(row["state"]))


def _drain(pipeline: Any) -> None:
    """Process what an aborted pipeline still holds, up to a Sync, so that it can be left
    (or used) without raising: the error may have come back while statements were still
    being sent, before the block's own ``sync``."""
    for _attempt in range(3):
        try:
            pipeline.sync()
            return
        except psycopg.errors.PipelineAborted:
            continue


def select_stream(recorder: object, originator_id: UUID, after_version: int, limit: int) -> Sequence[Notification]:
    """Dispatch to whichever ledger recorder the application was built with."""
    assert isinstance(recorder, SQLiteLedgerRecorder | PostgresLedgerRecorder), recorder
    return recorder.select_stream(originator_id, after_version, limit)
