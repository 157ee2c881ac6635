"""The projection runner: pulls the notification log and applies it to read models.

Each read model keeps its own tracking position in ``projection_tracking``; a batch of events
and the new position are written in one transaction, so a crash can neither skip nor
double-apply an event. The position moves by compare-and-set from the position the batch was
read at, before the batch is applied: two runners on the same read model cannot both apply a
batch, nor overlapping ones. A pull loop rather than ``recorder.subscribe()``,
because SQLite has no subscriptions; the same loop serves PostgreSQL.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from eventsourcing.persistence import Notification

from projections.batches import BatchApplier, EventDecoder, NotificationSource
from projections.db import Database, Dialect, Tx
from projections.live import BackgroundLoop, LiveState
from projections.past_head import PastHead
from projections.privileges import keep, privileges_of, unreadable_in
from projections.parallel_rebuild import OpenRunner, rebuild_in_processes
from projections.read_model import ReadModel
from projections.rebuild import rebuild_beside
from projections.tracking import (
    CLAIM_FUNCTION_DDL, TRACKING_DDL, applied_read_models, position_in, positions_in,
)

log = logging.getLogger(f"vmledger.{__name__}")


class ProjectionRunner(BackgroundLoop):
    """Keeps read models up to date with the log, in batches of ``batch_size`` events; a
    rebuild reads batches of ``rebuild_batch_size`` (larger: a rebuild's cost is mostly per
    batch and per VM touched in a batch, and nobody waits on its rows until the switch;
    docs/performance.md, P3). With ``rebuild_processes`` above 1 and ``open_runner`` (a
    picklable callable opening a runner like this one in another process:
    ``projections.parallel_rebuild``) a rebuild's read models are built in that many
    processes."""

    def __init__(
        self,
        db: Database,
        source: NotificationSource,
        decoder: EventDecoder,
        read_models: Iterable[ReadModel],
        *,
        batch_size: int = 500,
        rebuild_batch_size: int = 25_000,
        on_lag: Callable[[str, int], None] | None = None,
        lag_interval_s: float = 1.0,
        rebuild_processes: int = 1,
        open_runner: OpenRunner | None = None,
    ):
        self.db = db
        self.source = source
        self.batches = BatchApplier(db, source, decoder)
        self.read_models = {rm.name: rm for rm in read_models}
        self.batch_size = batch_size
        self.rebuild_batch_size = rebuild_batch_size
        self.rebuild_processes = rebuild_processes
        self.open_runner = open_runner
        self.on_lag = on_lag
        self.lag_interval_s = lag_interval_s
        self._lag_reported_at = float("-inf")
        self._wake = threading.Event()
        self._listeners: list[Callable[[], None]] = []
        self.past_head = PastHead(self.head)

    def create_tables(self) -> None:
        """Create the tracking table and every read model's tables (idempotent).

        A read model that has applied events (its tracking row is past 0) but lost a table
        (dropped by hand, or by a restore that left the tracking table), or whose table an
        older version made without a column this one writes, is left as it is: made again
        empty it would be served as if complete. Only the projection runner mends it, when
        its loop starts (``mend_stale_tables``); a warning says so."""
        with self.db.transaction() as tx:
            # each step in one round trip: start-up made one a statement and a table checked
            tx.execute_all([TRACKING_DDL] + ([CLAIM_FUNCTION_DDL]
                                             if self.db.dialect is Dialect.POSTGRES else []))
            stale = self._stale(tx, applied_read_models(self.db, tx))
            statements: list[str] = []
            for read_model in self.read_models.values():
                if stale[read_model.name]:
                    log.warning("read model %s has applied events but its table %s is missing "
                                "or lacks a column (an older version's): the projection runner "
                                "makes it again and rebuilds it from the log when it starts",
                                read_model.name, ", ".join(stale[read_model.name]))
                    continue
                statements += read_model.create_statements(self.db)
            tx.execute_all(statements)

    def mend_stale_tables(self) -> None:
        """Make every read model ``create_tables`` left stale again, empty, at position 0, so
        that the runner rebuilds it from the log (called as the runner's loop starts: only a
        process that will rebuild it drops anything)."""
        with self.db.schema_lock(), self.db.transaction() as tx:
            stale = self._stale(tx, applied_read_models(self.db, tx))
            for read_model in self.read_models.values():
                if not stale[read_model.name]:
                    continue
                log.warning("read model %s: its table %s was missing or lacked a column; it is "
                            "made again and rebuilt from the log", read_model.name,
                            ", ".join(stale[read_model.name]))
                kept = [privileges_of(tx, table) for table in read_model.real_tables()]
                for table in read_model.real_tables():
                    tx.execute(f"DROP TABLE IF EXISTS {table}")
                tx.execute("UPDATE projection_tracking SET position = 0 WHERE name = ?",
                           (read_model.name,))
                tx.execute_all(read_model.create_statements(self.db))
                for table, privileges in zip(read_model.real_tables(), kept):
                    keep(tx, table, privileges)  # the roles granted the old one keep them

    def _stale(self, tx: Tx, applied: set[str]) -> dict[str, list[str]]:
        """By read model name: its tables that are missing or lack a column, if it is among
        the read models that have ``applied`` events (else none: the tables of a read model
        at 0 are simply made). One catalogue query for them all."""
        checked = [rm for rm in self.read_models.values() if rm.name in applied]
        present = self.db.columns_of(tx, [t for rm in checked for t in rm.real_tables()])
        stale = {name: [] for name in self.read_models}
        stale.update((rm.name, rm.stale_among(present, self.db)) for rm in checked)
        return stale

    def position(self, name: str) -> int:
        """The last log position applied to read model ``name`` (0 before any)."""
        with self.db.transaction(commit=False) as tx:
            return self.position_in(tx, name)

    def positions(self) -> dict[str, int]:
        """Every read model's position."""
        return self._positions_of(self.read_models)

    def positions_and_unreadable(self) -> tuple[dict[str, int], list[str]]:
        """Every read model's position, and the tables of the read models the service's
        role may not read (``privileges.unreadable_in``; none on SQLite), in one pipelined
        transaction: one round trip (``/ping``'s probe)."""
        tables = [table for rm in self.read_models.values() for table in rm.real_tables()]
        with self.db.transaction(commit=False, pipeline=True) as tx:
            positions, unreadable = positions_in(tx, self.read_models), unreadable_in(tx, tables)
        return positions(), unreadable()

    def _positions_of(self, names: Iterable[str]) -> dict[str, int]:
        """The positions of read models ``names``, in one query (one round trip)."""
        with self.db.transaction(commit=False, pipeline=True) as tx:
            answer = positions_in(tx, names)
        return answer()

    position_in = staticmethod(position_in)  # read inside a caller's transaction

    def head(self) -> int:
        """The log's last position (0 when empty)."""
        return self.source.max_notification_id() or 0

    def run_once(self, name: str) -> int:
        """Apply the next batch to read model ``name``; return how many events it held."""
        return self.apply_next_batch(self.read_models[name])

    def apply_next_batch(self, read_model: ReadModel) -> int:
        """Apply the next batch to ``read_model`` (a live one, or one built beside) in one
        transaction with its tracking row; return how many events it held."""
        return self.batches.apply([read_model], self.position(read_model.name),
                                  self.batch_size)[0]

    def decode(self, notifications: Sequence[Notification]) -> list[tuple[int, Any]]:
        """``(position, domain event)`` pairs of ``notifications``."""
        return self.batches.decode(notifications)

    def catch_up(self, names: Iterable[str] | None = None,
                 progress: Callable[[int], None] | None = None, *,
                 live: LiveState | None = None) -> int:
        """Apply batches until the named read models (all by default) reach the head; return
        how many events were applied in all (an event applied to k read models counts k
        times). ``progress(n)`` is called after each batch with its ``n`` log events. The lag
        is reported after a pass that applied events; for the background loop (``live``, what
        it keeps between passes) at most once every ``lag_interval_s`` (docs/performance.md,
        P5)."""
        chosen = [self.read_models[name] for name in (names or list(self.read_models))]
        # The head is read at most once a pass, by the past-head check or the lag, whichever
        # asks first (an idle pass after one that applied events asks for both).
        head = functools.cache(self.head)
        total = self.catch_up_models(chosen, progress, live=live, head=head)
        if total:
            self._notify()
        self.report_lag(force=bool(total) and live is None, head=head)
        return total

    def catch_up_models(self, read_models: Sequence[ReadModel],
                        progress: Callable[[int], None] | None = None, *,
                        batch_size: int | None = None, live: LiveState | None = None,
                        head: Callable[[], int] | None = None) -> int:
        """``catch_up`` for read model instances (live ones, or ones built beside), in
        batches of ``batch_size`` events (the runner's by default).

        Read models at the same position (the live runner's usual case, and a rebuild's) share
        each batch: one log read, one decoding, one transaction (``BatchApplier.apply``). A batch
        shorter than ``batch_size`` reached the head as it was read, so no empty read follows
        it (round trips are most of a live pass: docs/performance.md, P5). ``live`` (the
        background loop's) says where the read models stand, read once when it does not
        know, and is kept up to date as batches commit; without it the positions are read
        before each batch. ``head`` reads the log's head for the past-head check (``head``
        by default)."""
        batch_size = batch_size or self.batch_size
        total = 0
        pending = list(read_models)
        if live is not None and live.positions is None:
            live.positions = self._positions_of(rm.name for rm in pending)
        while pending:
            at = live.positions if live is not None else self._positions_of(
                rm.name for rm in pending)
            pending = [rm for rm in pending if self.past_head.allowed(rm.name, at[rm.name])]
            if not pending:
                break
            start = min(at[rm.name] for rm in pending)
            group = [rm for rm in pending if at[rm.name] == start]
            applied, end = self.batches.apply(group, start, batch_size, live)
            if not applied and start:
                self.past_head.found_nothing((rm.name for rm in group), start,
                                             head or self.head)
            at.update((rm.name, end) for rm in group)
            if applied < batch_size:
                pending = [rm for rm in pending if rm not in group]
            total += applied * len(group)
            if applied and progress:
                progress(applied)
        return total

    def report_lag(self, *, force: bool = True, head: Callable[[], int] | None = None) -> None:
        """Tell ``on_lag`` how far each read model is behind the head (events, negative for
        one past the head: ``past_head``; ``head`` reads it, ``head`` by default); unless
        ``force``, at most once every ``lag_interval_s`` (an idle loop polls often)."""
        if self.on_lag is None:
            return
        now = time.monotonic()
        if not force and now - self._lag_reported_at < self.lag_interval_s:
            return
        self._lag_reported_at = now
        at = (head or self.head)()
        for name, position in self.positions().items():
            self.on_lag(name, at - position)

    def reset(self, names: Iterable[str]) -> None:
        """Empty the named read models and their positions, in one transaction."""
        with self.db.transaction() as tx:
            for name in names:
                for table in self.read_models[name].real_tables():
                    tx.execute(f"DELETE FROM {table}")  # table names are ours, not input
                tx.execute("DELETE FROM projection_tracking WHERE name = ?", (name,))

    def rebuild(self, names: Iterable[str] | None = None,
                progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the named read models (all by default) from position 1 while they keep
        serving: built together beside their live tables (one read of the log), then each
        switched in one transaction (``projections.rebuild``); split over
        ``rebuild_processes`` processes when the runner has an ``open_runner``
        (``projections.parallel_rebuild``: ``RebuildFailed`` when one fails, and nothing is
        switched). Returns how many events were applied in all; ``progress(n)`` is called
        after each batch with its ``n`` log events. A name given twice is rebuilt once
        (docs/operations.md): twice, its one shadow would be claimed and written twice."""
        chosen = [self.read_models[name] for name in dict.fromkeys(names or self.read_models)]
        if self.rebuild_processes > 1 and self.open_runner is not None and len(chosen) > 1:
            total = rebuild_in_processes(self, chosen, self.open_runner,
                                         self.rebuild_processes, progress)
        else:
            total = rebuild_beside(self, chosen, progress)
        self._notify()
        self.report_lag()
        return total

    # -- running in the background --------------------------------------------------------

    def wake(self) -> None:
        """Ask the background loop to look at the log now (a command was just saved)."""
        self._wake.set()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each batch that applied events (e.g. to wake the worker)."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()
