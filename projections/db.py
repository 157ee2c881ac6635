"""SQL access for read models, over the event store's own datastore (same database, same pool).

Statements are written once with ``?`` placeholders; ``Tx.execute`` adapts them to the
backend (``%s`` for psycopg). Values are always passed as parameters, never spliced in.
"""

from __future__ import annotations

import re
import sqlite3
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

import psycopg
from eventsourcing.persistence import OperationalError
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteCursor, SQLiteDatastore, SQLiteTransaction
from psycopg.pq import TransactionStatus

_SCHEMA_LOCK_KEY = 0x766D6C6564676572  # "vmledger"


class Dialect(StrEnum):
    """The two SQL backends."""

    SQLITE = "sqlite"
    POSTGRES = "postgres"


class Tx:
    """One open transaction: execute statements and fetch rows as dicts.

    ``new_cursor`` (PostgreSQL pipeline mode) gives every statement a cursor of its own: in a
    pipeline an earlier statement's result can reach a shared cursor after a later statement
    was sent, and a fetch would then read the earlier result (psycopg fetches only for a
    cursor that holds no result)."""

    def __init__(self, cursor: Any, dialect: Dialect, *,
                 new_cursor: Callable[[], Any] | None = None):
        self._cursor = cursor
        self.dialect = dialect
        self._new_cursor = new_cursor

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        """Run ``statement`` (``?`` placeholders) with ``params``."""
        if self.dialect is Dialect.POSTGRES:
            statement = statement.replace("?", "%s")
        if self._new_cursor is not None:
            self._cursor = self._new_cursor()
        self._cursor.execute(statement, tuple(params))

    def execute_all(self, statements: Iterable[str]) -> None:
        """Run ``statements`` (no parameters: DDL; sent as they are) in order, the first that
        fails raising: on PostgreSQL as one query, one round trip (start-up made ~40 so);
        in a pipeline, and on SQLite (one statement a call), one by one."""
        statements = list(statements)
        if self.dialect is Dialect.POSTGRES and self._new_cursor is None and statements:
            self._cursor.execute(";\n".join(statements))  # no params: nothing is a placeholder
            return
        for statement in statements:
            if self._new_cursor is not None:
                self._cursor = self._new_cursor()
            self._cursor.execute(statement)

    def executemany(self, statement: str, params_seq: Sequence[Sequence[Any]]) -> None:
        """Run ``statement`` once per entry of ``params_seq`` (nothing when it is empty): one
        call rather than a Python round of ``execute`` per row (psycopg pipelines them)."""
        if not params_seq:
            return
        if self.dialect is Dialect.POSTGRES:
            statement = statement.replace("?", "%s")
        if self._new_cursor is not None:
            self._cursor = self._new_cursor()
        self._cursor.executemany(statement, [tuple(params) for params in params_seq])

    def submit(self, statement: str, params: Sequence[Any] = ()
               ) -> Callable[[], list[dict[str, Any]]]:
        """Run ``statement`` and return a function that gives its rows later: in a PostgreSQL
        pipeline the statement is sent now and its result read when asked for, by which time
        later statements' fetches have usually brought it back (no round trip of its own);
        elsewhere the rows are read at once (SQLite shares one cursor)."""
        self.execute(statement, params)
        cursor = self._cursor
        if self._new_cursor is not None:
            return lambda: [dict(row) for row in cursor.fetchall()]
        rows = self.fetchall()
        return lambda: rows

    def fetchall(self) -> list[dict[str, Any]]:
        """The remaining rows of the last statement."""
        return [dict(row) for row in self._cursor.fetchall()]

    def fetchone(self) -> dict[str, Any] | None:
        """The next row of the last statement, or None."""
        row = self._cursor.fetchone()
        return None if row is None else dict(row)

    def submit_rows_by_key(self, table: str, column: str, keys: Iterable[str], *,
                           columns: str = "*", chunk: int = 500
                           ) -> Callable[[], dict[str, dict[str, Any]]]:
        """The rows of ``table`` whose ``column`` is one of ``keys``, by that column's value
        (keys without a row are absent), as the function returned gives them: its queries are
        sent now (``submit``) and their rows read when it is called, so several read models'
        reads sent before any is read come back in one round trip of a PostgreSQL pipeline
        (docs/performance.md, P5). One query per ``chunk`` keys rather than one per key (P3).
        ``table``, ``column`` and ``columns`` (which must include ``column``) are ours, never
        input."""
        ordered = sorted(set(keys))
        answers = [
            self.submit(f"SELECT {columns} FROM {table} WHERE {column} IN "
                        f"({', '.join('?' * len(part))})", part)
            for part in (ordered[start:start + chunk] for start in range(0, len(ordered), chunk))
        ]

        def rows() -> dict[str, dict[str, Any]]:
            return {row[column]: row for answer in answers for row in answer()}
        return rows


class _ImmediateTransaction(SQLiteTransaction):
    """The library's SQLite transaction (errors mapped to its own), begun ``IMMEDIATE``."""

    def __enter__(self) -> SQLiteCursor:
        cursor = self.connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:  # still locked after the busy timeout
            raise OperationalError(error) from error
        return cursor


# Each pooled SQLite connection's own synchronous level, read once (nothing else changes it).
_OWN_LEVELS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


@contextmanager
def _synchronous(conn: Any, *, durable: bool) -> Iterator[None]:
    """Unless ``durable``, SQLite's ``synchronous = NORMAL`` for what runs inside (it cannot
    change within a transaction, so it is set around one), then the connection's own level
    again: the event store's commits on this pooled connection stay as synced as before. The
    own level is read on a connection's first such transaction only: two statements a batch
    instead of three (docs/performance.md, P5)."""
    if durable:
        yield
        return
    cursor = conn.cursor()
    level = _OWN_LEVELS.get(conn)
    if level is None:
        cursor.execute("PRAGMA synchronous")
        level = _OWN_LEVELS[conn] = int(cursor.fetchone()[0])
    cursor.execute("PRAGMA synchronous = NORMAL")
    try:
        yield
    finally:
        conn.cursor().execute(f"PRAGMA synchronous = {level}")  # an int we read, not input


@contextmanager
def _pipelined(conn: Any, *, commit: bool, durable: bool) -> Iterator[Tx]:
    """One transaction in one PostgreSQL pipeline: ``BEGIN``, the block's statements and
    ``COMMIT`` are sent as they come and synced once, at the end; only a fetch inside the
    block waits for the server before that. psycopg's own ``Connection.transaction()`` syncs
    the pipeline after ``BEGIN`` and twice at the end, three round trips more
    (docs/performance.md, P5).

    Unless ``commit`` the transaction is ``READ ONLY`` (a write in it fails) and ends with
    ``COMMIT`` too, which for it is the same as a rollback: psycopg forgets its prepared
    statements when it sees a ``ROLLBACK`` statement's result, and in a pipeline it does so
    after the next statement was already prepared, which then "does not exist". On any
    error the transaction is rolled back once the pipeline is left, by
    ``Connection.rollback`` (it forgets and deallocates the prepared statements in order: an
    aborted pipeline may have skipped a ``PREPARE``); a closed connection (a bounded wait ran
    out) is left as it is, so its error is the one raised.

    An error raised inside the block (a claim another runner won, seen while the batch was
    still being sent) is raised once the pipeline is left, its results read first
    (``_drained``): psycopg, left with unread results, logs ``error ignored terminating
    <psycopg.Pipeline [INERROR] ...>: pipeline aborted`` for what is a normal event with
    several runners (operator tester: 83 lines in 23 s with two ``vmledger project``)."""
    raised: Exception | None = None
    try:
        with conn.pipeline() as pipeline:
            try:
                tx = Tx(conn.cursor(), Dialect.POSTGRES, new_cursor=conn.cursor)
                tx.execute("BEGIN" if commit else "BEGIN READ ONLY")
                if not durable:
                    tx.execute("SET LOCAL synchronous_commit = off")
                yield tx
                tx.execute("COMMIT")
            except Exception as error:
                if not _drained(conn, pipeline):
                    raise  # the connection is lost: psycopg's warning says nothing more
                raised = error
        if raised is not None:
            raise raised
    except BaseException:
        if conn.info.transaction_status in (TransactionStatus.INTRANS,
                                            TransactionStatus.INERROR):
            conn.rollback()
        raise


def _drained(conn: Any, pipeline: Any) -> bool:
    """Read what ``pipeline`` still holds after an error, up to a Sync (the error itself if
    it was not read yet, then the statements the server skipped), so that it is left
    without an error; False if that cannot be done (the connection is lost)."""
    for _attempt in range(3):
        try:
            pipeline.sync()
            return True
        except psycopg.Error:
            if conn.closed or conn.pgconn.status == psycopg.pq.ConnStatus.BAD:
                return False
    return False


class Database:
    """The read models' database: the same one, and the same connection pool, as the events."""

    def __init__(self, datastore: SQLiteDatastore | PostgresDatastore):
        self._datastore = datastore
        if isinstance(datastore, SQLiteDatastore):
            self.dialect = Dialect.SQLITE
        elif isinstance(datastore, PostgresDatastore):
            self.dialect = Dialect.POSTGRES
        else:  # pragma: no cover - only the two backends exist
            raise TypeError(f"unsupported datastore {datastore!r}")

    @contextmanager
    def transaction(self, *, commit: bool = True, pipeline: bool = False,
                    durable: bool = True) -> Iterator[Tx]:
        """A transaction that commits on success (if ``commit``) and rolls back on error.

        For the projection runner's batches (docs/performance.md, P3 and P5): ``pipeline``
        (PostgreSQL only, ignored on SQLite) sends statements without waiting for their
        results, which are fetched when a ``fetch*`` needs them (an error surfaces at the next
        fetch or at the end, and rolls the transaction back as usual); ``durable=False``
        commits without waiting for the log to reach the disk (PostgreSQL:
        ``synchronous_commit = off``; SQLite: ``synchronous = NORMAL`` for this commit, which
        in WAL mode does not sync the WAL): an operating-system crash or a power cut may lose
        the last such commits, rows and tracking position together, and the runner applies
        those events again. Only for what can be rebuilt from the log."""
        if pipeline and isinstance(self._datastore, PostgresDatastore):
            with self._datastore.get_connection() as conn, \
                    _pipelined(conn, commit=commit, durable=durable) as tx:
                yield tx
            return
        if commit and isinstance(self._datastore, SQLiteDatastore):
            # A write transaction takes SQLite's write lock at BEGIN, waiting (busy timeout)
            # for another process's writer. With a plain BEGIN a transaction that read first
            # fails at once with "database is locked" when its write meets another writer's
            # commit (WAL mode cannot upgrade a stale read snapshot; the busy handler is not
            # called): the simulated driver's read-then-update failed so (issue #13).
            with self._datastore.get_connection(commit=True) as conn, \
                    _synchronous(conn, durable=durable), \
                    _ImmediateTransaction(conn, commit=True) as cursor, cursor:
                yield Tx(cursor, self.dialect)
            return
        with self._datastore.transaction(commit=commit) as cursor:
            yield Tx(cursor, self.dialect)

    def one(self, statement: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        """The first row a read-only query answers, or None (its own transaction)."""
        with self.transaction(commit=False) as tx:
            tx.execute(statement, params)
            return tx.fetchone()

    @contextmanager
    def schema_lock(self) -> Iterator[None]:
        """Serialize schema creation across processes starting together (PostgreSQL's
        ``CREATE ... IF NOT EXISTS`` and ``CREATE OR REPLACE FUNCTION`` race otherwise)."""
        if self.dialect is Dialect.SQLITE:
            yield  # SQLite serializes writers with its file lock
            return
        assert isinstance(self._datastore, PostgresDatastore)
        with self._datastore.get_connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK_KEY,))

    def columns(self, tx: Tx, table: str) -> set[str]:
        """The columns ``table`` has now, read in ``tx`` (none when there is no such table)."""
        return self.columns_of(tx, [table])[table]

    def columns_of(self, tx: Tx, tables: Iterable[str]) -> dict[str, set[str]]:
        """The columns each of ``tables`` (the service's own names, in lower case) has now,
        read in ``tx`` with one catalogue query (none for a table that does not exist). On
        SQLite a table's name is matched in any case, as SQLite names tables. On PostgreSQL a
        table the role has no privilege on has its columns too: ``information_schema``,
        read before, leaves such a table out, and the schema check called it missing
        (operator tester: 'lacks CREATE on schema public (vm_view, ... missing)' for an
        auditor's role that lacked SELECT on tables that were there)."""
        found: dict[str, set[str]] = {table: set() for table in tables}
        if not found:
            return found
        names = ", ".join("?" * len(found))
        if self.dialect is Dialect.SQLITE:
            tx.execute("SELECT lower(t.name) AS table_name, c.name AS column_name FROM "
                       "sqlite_master AS t JOIN pragma_table_info(t.name) AS c WHERE t.type "
                       f"IN ('table', 'view') AND lower(t.name) IN ({names})", list(found))
        else:  # the catalogue itself: information_schema hides what the role may not use
            tx.execute("SELECT c.relname AS table_name, a.attname AS column_name FROM pg_class "
                       "AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace JOIN pg_attribute "
                       "AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
                       "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', "
                       f"'m', 'f') AND c.relname IN ({names})", list(found))
        for row in tx.fetchall():
            found[row["table_name"]].add(row["column_name"])
        return found

    def blob_type(self) -> str:
        """The column type for bytes."""
        return "BLOB" if self.dialect is Dialect.SQLITE else "BYTEA"


_CREATE_TABLE = re.compile(r"\s*CREATE TABLE IF NOT EXISTS (\w+)\s*\((.*)\)",
                           re.DOTALL | re.IGNORECASE)
_CONSTRAINTS = frozenset({"PRIMARY", "UNIQUE", "CONSTRAINT", "FOREIGN", "CHECK"})


def declared_columns(statement: str) -> tuple[str, list[str]] | None:
    """The table and the columns a ``CREATE TABLE IF NOT EXISTS name (...)`` statement
    declares, in order (constraint clauses left out); None for any other statement."""
    found = _CREATE_TABLE.match(statement)
    if found is None:
        return None
    items, depth, quoted, start = [], 0, False, 0
    body = found.group(2)
    for index, char in enumerate(body):
        quoted ^= char == "'"  # a comma in a DEFAULT's text separates nothing
        depth += 0 if quoted else {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0 and not quoted:
            items.append(body[start:index])
            start = index + 1
    items.append(body[start:])
    words = [item.split()[0] for item in items if item.split()]
    return found.group(1), [word for word in words if word.upper() not in _CONSTRAINTS]
