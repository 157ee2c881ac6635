"""Reading the log in position order without ever skipping an append that commits late.

A position missing between the last one read and a later visible one (a *gap*) is either
permanent (the insert rolled back: a version conflict consumes a sequence value on
PostgreSQL) or an append still in flight that will commit later. The projection runner
relies on the event store's table lock (an append takes ``LOCK TABLE ... EXCLUSIVE`` before it
draws ids, so ids of committed rows only grow); this reader does not need it. On PostgreSQL it
stops before a gap and passes it only once every transaction of this database that had
written to the event table when the gap was first seen has ended, then reads the range
again: what committed meanwhile is delivered, what is still missing never will be (the
writer of a missing row had written it, so it was among them). A writer that draws a
sequence value before it first writes cannot be seen that way; ``gap_grace_s`` keeps every
gap open at least that long for it (the library's insert draws and writes in one statement,
under the lock). A gap still open after ``gap_timeout_s`` (a transaction left open for
minutes) is passed with a warning, so one stuck session cannot stop every stream. SQLite has
one writer at a time, drawing rowids inside it, so a gap there is permanent at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from eventsourcing.persistence import Notification
from psycopg.sql import SQL, Identifier, Literal

from service.storage import PostgresLedgerRecorder

log = logging.getLogger(f"vmledger.{__name__}")


@dataclass
class _Gap:
    """A gap first seen at ``seen_at`` (monotonic s), when ``writers`` (backend pid,
    transaction id) were running; ``settled`` once they all ended."""

    start: int  # the first missing position
    seen_at: float
    writers: set[tuple[int, str]]
    settled: bool = False


class LogReader:
    """Reads ``(position, notification)`` batches after a position, stopping before any gap
    that may still fill. One reader per cursor: it remembers the gap it waits on."""

    def __init__(self, recorder: object, *, gap_grace_s: float = 0.0,
                 gap_timeout_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 on_gap_skipped: Callable[[], None] | None = None):
        self.recorder = recorder
        self.postgres = isinstance(recorder, PostgresLedgerRecorder)
        self.gap_grace_s = gap_grace_s
        self.gap_timeout_s = gap_timeout_s
        self.clock = clock
        self.on_gap_skipped = on_gap_skipped
        self._gap: _Gap | None = None

    @property
    def waiting_on_gap(self) -> bool:
        """Whether the last read stopped before a gap that may still fill."""
        return self._gap is not None

    def head(self) -> int:
        """The highest position committed now (0 for an empty log)."""
        return self.recorder.max_notification_id() or 0  # type: ignore[attr-defined]

    def read_after(self, position: int, limit: int, stop: int | None = None,
                   ) -> tuple[list[Notification], int]:
        """Up to ``limit`` notifications after ``position`` (and at most ``stop``) in order, and
        the position the next read starts after: the last one returned, or past gaps proven
        permanent. Notifications after an open gap are held back (``waiting_on_gap``)."""
        rows = self.recorder.select_notifications(  # type: ignore[attr-defined]
            position, limit, stop, inclusive_of_start=False)
        taken: list[Notification] = []
        cursor = position
        for row in rows:
            if row.id != cursor + 1 and not self._passable(cursor + 1):
                return taken, cursor
            taken.append(row)
            cursor = row.id
        self._gap = None
        return taken, cursor

    def _passable(self, missing: int) -> bool:
        """Whether the gap starting at ``missing`` is proven permanent (or timed out)."""
        if not self.postgres:
            return True
        now = self.clock()
        gap = self._gap
        if gap is None or gap.start != missing:
            self._gap = _Gap(missing, now, self._writers())
            return False
        if now - gap.seen_at < self.gap_grace_s:
            return False
        if gap.settled:
            self._gap = None
            return True
        if not gap.writers & self._writers():
            # Every writer of then has ended; a row one of them committed is only seen by
            # reading again, so answer "not yet" once more, with the gap marked settled.
            gap.settled = True
            return False
        if now - gap.seen_at >= self.gap_timeout_s:
            log.warning("changefeed: position %d still missing after %.0f s (a transaction "
                        "left open?); passing it", missing, now - gap.seen_at)
            if self.on_gap_skipped:
                self.on_gap_skipped()
            self._gap = None
            return True
        return False

    def _writers(self) -> set[tuple[int, str]]:
        """The (pid, transaction id) of every other session of this database whose open
        transaction has written to the event table: it holds a lock on the table that an
        ``INSERT`` takes (``ROW EXCLUSIVE`` or stronger) until it ends. A session that wrote
        elsewhere only (an analyst's temporary table) cannot fill a gap, so it is not
        waited for."""
        recorder = self.recorder
        assert isinstance(recorder, PostgresLedgerRecorder)
        table = Identifier(recorder.datastore.schema, recorder.events_table_name)
        with recorder.datastore.transaction(commit=False) as curs:
            curs.execute(SQL(
                "SELECT DISTINCT a.pid, a.backend_xid::text AS xid FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'relation' AND l.relation = {}::regclass "
                "AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', "
                "'AccessExclusiveLock') AND a.backend_xid IS NOT NULL "
                "AND a.pid <> pg_backend_pid()").format(Literal(table.as_string())))
            return {(int(row["pid"]), str(row["xid"])) for row in curs.fetchall()}
