"""Reading the log in position order without ever skipping an append that commits late.

A position missing between the last one read and a later visible one (a *gap*) is either
permanent (the insert rolled back: a version conflict consumes a sequence value on
PostgreSQL) or an append still in flight that will commit later. The projection runner
relies on the event store's table lock (an append takes ``LOCK TABLE ... EXCLUSIVE`` before it
draws ids, so ids of committed rows only grow); this reader does not need it.

On PostgreSQL it proves gaps permanent a stretch of the log at a time (``Proof``). Meeting a
gap, it reads the log's head ``H`` and then which transactions of this database have written
to the event table (``_writers``). A position below ``H`` that may still commit was drawn
before ``H`` was, so its transaction was running when ``H`` was read, and is among those noted
(an append draws its position and writes in one statement, the library's insert, so it has
written from then on). Once they have all ended, any read shows every position below
``H`` that will ever hold an event: ``H`` becomes the ``SettledHorizon`` and the log is read
again at once, delivering what committed meanwhile and passing every gap below ``H``, the one
met and every older one, without another wait (a replay of an old log proves its gaps once,
not once each; readers sharing a horizon prove them once between them). A gap still open
after ``gap_timeout_s`` (a transaction left open for minutes) is passed with a warning, with
every other gap below ``H``, so one stuck session can neither stop every stream nor hold each
old gap as long. SQLite has one writer at a time, drawing rowids inside it, so a gap there is
permanent at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from eventsourcing.persistence import Notification
from psycopg.sql import SQL, Identifier, Literal

from service.storage import PostgresLedgerRecorder

log = logging.getLogger(f"vmledger.{__name__}")


class SettledHorizon:
    """A log position below which every missing position is settled for any read made from
    now on: permanent, or given up on (``gap_timeout_s``). 0: none proven yet. Readers of one
    process share it (the change hub's and its streams' catch-up readers), so what one proved
    no other proves again."""

    def __init__(self) -> None:
        self._position = 0
        self._lock = threading.Lock()  # readers run in worker threads

    @property
    def position(self) -> int:
        """Every position below this one is read or permanently missing."""
        return self._position

    def raise_to(self, position: int) -> None:
        """Record that every position below ``position`` is settled (it never lowers)."""
        with self._lock:
            self._position = max(self._position, position)


@dataclass(frozen=True)
class Proof:
    """The log's ``head``, then (read after it: the proof needs this order) the ``writers``
    running (backend pid, transaction id): once they have all ended, every position below
    ``head`` is settled for any read made after that."""

    head: int
    writers: frozenset[tuple[int, str]]


@dataclass
class _Gap:
    """A gap at ``start`` first seen at ``seen_at`` (monotonic s), with the proof begun then."""

    start: int
    seen_at: float
    proof: Proof


class _Verdict(Enum):
    PASS = "pass"  # settled: read on past it
    READ_AGAIN = "read again"  # settled since the read: read the range again, now
    WAIT = "wait"  # may still fill: the caller reads again later


class LogReader:
    """Reads ``(position, notification)`` batches after a position, stopping before any gap
    that may still fill. One reader per cursor: it remembers the gap it waits on. Readers
    given the same ``horizon`` share what they proved settled."""

    def __init__(self, recorder: object, *, gap_timeout_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_gap_skipped: Callable[[], None] | None = None,
                 horizon: SettledHorizon | None = None):
        self.recorder = recorder
        self.postgres = isinstance(recorder, PostgresLedgerRecorder)
        self.gap_timeout_s = gap_timeout_s
        self.clock = clock
        self.on_gap_skipped = on_gap_skipped
        self.horizon = horizon or SettledHorizon()
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
        taken: list[Notification] = []
        cursor = position
        while True:
            rows = self.recorder.select_notifications(  # type: ignore[attr-defined]
                cursor, limit - len(taken), stop, inclusive_of_start=False)
            verdict = _Verdict.PASS
            for row in rows:
                if row.id != cursor + 1:
                    verdict = self._verdict(cursor + 1)
                    if verdict is not _Verdict.PASS:
                        break
                taken.append(row)
                cursor = row.id
            if verdict is _Verdict.PASS:
                self._gap = None
                return taken, cursor
            if verdict is _Verdict.WAIT:
                return taken, cursor

    def _verdict(self, missing: int) -> _Verdict:
        """What to do at the gap starting at ``missing``, met in a read just made."""
        if not self.postgres or missing < self.horizon.position:
            return _Verdict.PASS
        now = self.clock()
        gap = self._gap
        if gap is None or gap.start != missing:
            gap = self._gap = _Gap(missing, now, self.begin_proof())
            settled = not gap.proof.writers  # no need to ask again at once
        else:
            settled = self.proven(gap.proof)
        if not settled:
            if now - gap.seen_at < self.gap_timeout_s:
                return _Verdict.WAIT
            # Only a transaction open that long can still fill a position below the proof's
            # head: pass them all, as this one, rather than wait as long at each.
            log.warning("changefeed: position %d still missing after %.0f s (a transaction "
                        "left open?); passing it, and any other gap below %d",
                        missing, now - gap.seen_at, gap.proof.head)
            if self.on_gap_skipped:
                self.on_gap_skipped()
        # A row a writer of then committed since the read is only seen by reading again,
        # which passes this gap and every other below the proof's head.
        self.horizon.raise_to(gap.proof.head)
        self._gap = None
        return _Verdict.READ_AGAIN

    def begin_proof(self) -> Proof:
        """A proof begun now (on SQLite, settled as it begins: one writer at a time, so a
        position missing below the head is permanent)."""
        head = self.head()
        return Proof(head, frozenset(self._writers()) if self.postgres else frozenset())

    def proven(self, proof: Proof) -> bool:
        """Whether every writer of ``proof`` has ended (every position below its head is
        then settled for any read made from now on)."""
        return not proof.writers or not proof.writers & self._writers()

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
