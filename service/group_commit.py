"""Group commit on PostgreSQL: the appends of a batch (``service.commands.committer``) in one
transaction under one table lock, with one ``NOTIFY`` and one WAL flush, each append that
conflicts failing alone (docs/performance.md, "Group commit"). What the PostgreSQL ledger
recorder's ``insert_batch`` does (``service.storage.PostgresLedgerRecorder``); its statements
are ``service.storage_statements.AppendStatements``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.utils import retry

from projections.db import Dialect
from service.commands.idempotency import insert_in_recorder
from service.storage_statements import AppendStatements

# One append of a group commit: its stored events and ``app.save``'s keyword arguments.
Append = tuple[Sequence[StoredEvent], dict[str, Any]]
# What became of it: its events' notification ids, or the IntegrityError it alone met.
Outcome = Sequence[int] | IntegrityError
# A batch's events go in one query's INSERT up to this many (a few hundred KB of text); a
# larger batch, rare (the committer takes 128 appends at most), goes an append an INSERT.
_INSERTED_TOGETHER_UP_TO = 4_096


class PostgresGroupCommit:
    """The group commit of a PostgreSQL event store: its ``datastore`` and the recorder's
    append ``statements``."""

    def __init__(self, datastore: PostgresDatastore, statements: AppendStatements):
        self.datastore = datastore
        self._append_sql = statements

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


class _Rendered:
    """A cursor for ``insert_in_recorder`` that sends nothing: each statement it is given is
    kept as text, its parameters bound by ``cursor`` (a ``psycopg.ClientCursor``)."""

    def __init__(self, cursor: psycopg.ClientCursor[Any]):
        self._cursor = cursor
        self.statements: list[str] = []

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        self.statements.append(self._cursor.mogrify(statement, params))


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
