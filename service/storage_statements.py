"""The statements of a PostgreSQL group commit (``PostgresLedgerRecorder.insert_batch``) and
of a stream's read (``select_events``: every load's fast-forward), rendered to text once a
recorder instead of once a call.

The library builds its statements as ``psycopg.sql.Composed`` objects, which psycopg renders
again on every ``execute``, and inserts a stream's events as one array of a composite type,
which psycopg's composite dumper serializes in Python, field by field. Under the P1 load that
was about a third of the committer thread's Python (docs/performance.md, "The committer's
statements"). Here the same statements are plain text, and the events go in a multi-row
``VALUES`` of four plain parameters each (uuid, bigint, text, bytea), which psycopg's C
dumpers serialize (or bind into the text: ``insert_text``): the same rows, the same lock,
the same ``NOTIFY``. A stream's read is
the library's query, its rows taken as tuples (a dict row's names are looked up again for
every query).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent
from psycopg.rows import tuple_row
from psycopg.sql import Identifier

# A batch's INSERT holds a few events an append; longer ones are rare (a create with many NICs,
# a batch of many appends).
_KEEP_INSERTS_UP_TO = 256


class AppendStatements:
    """A recorder's append statements as text (``recorder``: a ``PostgresApplicationRecorder``
    on its events table, schema, lock timeout and channel)."""

    def __init__(self, recorder: Any):
        table = Identifier(recorder.datastore.schema, recorder.events_table_name).as_string()
        # BEGIN, then the library's lock (PostgresApplicationRecorder.lock_table_statements)
        # and NOTIFY (its _notify_channel), in the order the library sends them.
        self.opening: tuple[str, ...] = (
            "BEGIN",
            f"SET LOCAL lock_timeout = '{recorder.datastore.lock_timeout}s'",
            f"LOCK TABLE {table} IN EXCLUSIVE MODE",
            f"NOTIFY {Identifier(recorder.channel_name).as_string()}",
        )
        # The rows of given (stream, version) pairs: an append's events, if they are there.
        self.landed = (f"SELECT originator_id, originator_version, notification_id, state "
                       f"FROM {table} WHERE (originator_id, originator_version) IN "
                       f"(SELECT * FROM unnest(%s::uuid[], %s::bigint[]))")
        self._insert_head = (f"INSERT INTO {table} "
                             "(originator_id, originator_version, topic, state) VALUES ")
        self._inserts: dict[int, str] = {}

    def insert(self, cursor: Any, stored_events: Sequence[StoredEvent]) -> None:
        """Send the INSERT of ``stored_events`` on ``cursor``; it returns one row each,
        ``notification_id``."""
        cursor.execute(self._insert_of(len(stored_events)), _params(stored_events))

    def insert_text(self, cursor: Any, stored_events: Sequence[StoredEvent]) -> str:
        """The INSERT of ``stored_events`` as text, its parameters bound by ``cursor`` (a
        ``psycopg.ClientCursor``: ``mogrify``)."""
        return cursor.mogrify(self._insert_of(len(stored_events)), _params(stored_events))

    def _insert_of(self, count: int) -> str:
        statement = self._inserts.get(count)
        if statement is None:
            statement = (self._insert_head + ", ".join(["(%s, %s, %s, %s)"] * count)
                         + " RETURNING notification_id")
            if count <= _KEEP_INSERTS_UP_TO:
                self._inserts[count] = statement
        return statement


def _params(stored_events: Sequence[StoredEvent]) -> list[Any]:
    params: list[Any] = []
    for event in stored_events:
        params += (event.originator_id, event.originator_version, event.topic, event.state)
    return params


class StreamReads:
    """``select_events`` of a recorder's events table (``recorder``: a
    ``PostgresApplicationRecorder``), with the library's arguments and answer."""

    def __init__(self, recorder: Any):
        self._datastore = recorder.datastore
        table = Identifier(recorder.datastore.schema, recorder.events_table_name).as_string()
        self._head = (f"SELECT originator_id, originator_version, topic, state FROM {table} "
                      "WHERE originator_id = %s")
        self._statements: dict[tuple[bool, bool, bool, bool], str] = {}

    def select(self, originator_id: Any, *, gt: int | None = None, lte: int | None = None,
               desc: bool = False, limit: int | None = None) -> list[StoredEvent]:
        """The stream's stored events with ``gt < version <= lte``, oldest first (newest
        first if ``desc``), ``limit`` at most (``PostgresAggregateRecorder.select_events``)."""
        shape = (gt is not None, lte is not None, desc, limit is not None)
        statement = self._statements.get(shape) or self._statement(shape)
        params = [originator_id, *(p for p in (gt, lte, limit) if p is not None)]
        with self._datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as c:
            c.execute(statement, params, prepare=True)
            return [StoredEvent(originator_id=row[0], originator_version=row[1], topic=row[2],
                                state=bytes(row[3])) for row in c.fetchall()]

    def _statement(self, shape: tuple[bool, bool, bool, bool]) -> str:
        after, up_to, desc, limited = shape
        statement = (self._head + (" AND originator_version > %s" if after else "")
                     + (" AND originator_version <= %s" if up_to else "")
                     + " ORDER BY originator_version" + (" DESC" if desc else " ASC")
                     + (" LIMIT %s" if limited else ""))
        self._statements[shape] = statement
        return statement
