"""SQL access for read models, over the event store's own datastore (same database, same pool).

Statements are written once with ``?`` placeholders; ``Tx.execute`` adapts them to the
backend (``%s`` for psycopg). Values are always passed as parameters, never spliced in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore


_SCHEMA_LOCK_KEY = 0x766D6C6564676572  # "vmledger"


class Dialect(StrEnum):
    """The two SQL backends."""

    SQLITE = "sqlite"
    POSTGRES = "postgres"


class Tx:
    """One open transaction: execute statements and fetch rows as dicts."""

    def __init__(self, cursor: Any, dialect: Dialect):
        self._cursor = cursor
        self.dialect = dialect

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        """Run ``statement`` (``?`` placeholders) with ``params``."""
        if self.dialect is Dialect.POSTGRES:
            statement = statement.replace("?", "%s")
        self._cursor.execute(statement, tuple(params))

    def fetchall(self) -> list[dict[str, Any]]:
        """The remaining rows of the last statement."""
        return [dict(row) for row in self._cursor.fetchall()]

    def fetchone(self) -> dict[str, Any] | None:
        """The next row of the last statement, or None."""
        row = self._cursor.fetchone()
        return None if row is None else dict(row)


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
    def transaction(self, *, commit: bool = True) -> Iterator[Tx]:
        """A transaction that commits on success (if ``commit``) and rolls back on error."""
        with self._datastore.transaction(commit=commit) as cursor:
            yield Tx(cursor, self.dialect)

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

    def blob_type(self) -> str:
        """The column type for bytes."""
        return "BLOB" if self.dialect is Dialect.SQLITE else "BYTEA"
