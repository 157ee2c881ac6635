"""One batch of the log applied to a group of read models: read once, decoded once, and
applied to all of them in one transaction that also moves their tracking positions, by
compare-and-set from the position the batch was read at (``projections.tracking``). The
runner (``projections.runner``) decides which read models share a batch and when; this is
what one batch does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from eventsourcing.persistence import Notification

from projections.db import Database, Dialect, Tx
from projections.live import LiveState, LogInTransaction
from projections.read_model import ReadModel, apply_together, batches_begin, batches_ended
from projections.tracking import (
    ProjectionConflictError, claim, claim_or_abort, conflict_over, refused,
)
from projections.tracking_behind import TrackingBehindError, rows_past
from projections.writes_later import WritesLater, fold_outside_the_lock


class NotificationSource(Protocol):
    """What the runner needs of the event store's recorder."""

    def select_notifications(
        self, start: int | None, limit: int, stop: int | None = None,
        topics: Sequence[str] = (), *, inclusive_of_start: bool = True,
    ) -> Sequence[Notification]: ...

    def max_notification_id(self) -> int | None: ...


class EventDecoder(Protocol):
    """What the runner needs of the application's mapper."""

    def to_domain_event(self, stored: Any) -> Any: ...


class BatchApplier:
    """Applies batches of ``source``'s log, decoded by ``decoder``, to read models in
    ``db``."""

    def __init__(self, db: Database, source: NotificationSource, decoder: EventDecoder):
        self.db = db
        self.source = source
        self.decoder = decoder
        # asked once: a runtime-checkable protocol's isinstance costs µs on every batch
        self._reads_in_transaction = isinstance(source, LogInTransaction)

    def apply(self, group: Sequence[ReadModel], start: int, batch_size: int,
              live: LiveState | None = None) -> tuple[int, int]:
        """Read the batch (``batch_size`` events) after position
        ``start`` once, decode it once, and apply it to every read model of ``group`` (all at
        ``start``) in one transaction that also moves their tracking rows; return how many
        events the batch held and the position the group reached (``start`` when none).
        For the runner's background loop (``live``) the batch may have been read ahead in the
        last one's transaction, and the next one is read ahead in this one's (``_read_ahead``).

        Each read model of ``group`` is told the batch begins and whether it committed
        (``ReadModel.batch_begins``, ``batch_ended``), so what one keeps between batches is
        used only by a batch from the position it was kept at, and dropped when a batch does
        not commit (``projections.kept_folds``). On SQLite the read models with blind writes
        fold the batch before the write transaction, which only runs their statements
        (``projections.writes_later``): the database's one write lock is held for SQL, not
        for Python.

        Sharing decoded events between read models relies on ``apply`` never changing an
        event (the domain's fold copies what it keeps: tests/projections/test_runner.py).
        The transaction commits without waiting for the WAL on PostgreSQL
        (``Database.transaction(durable=False)``): a crash may lose the last batches, rows and
        positions together, and they are applied again (docs/performance.md, P3 and P5)."""
        notifications = live.take_ahead(start) if live is not None else None
        if notifications is None:
            notifications = self.source.select_notifications(
                start, batch_size, inclusive_of_start=False)
        if not notifications:
            return 0, start
        events = self.decode(notifications)
        end = notifications[-1].id
        ahead = None
        committed = None
        batches_begin(group, start)
        try:
            try:
                later, under_lock = fold_outside_the_lock(self.db, group, start, events)
                with self.db.transaction(pipeline=True, durable=False) as tx:
                    ahead = self._write(tx, group, start, end, events, under_lock,
                                              later, batch_size, live)
            except (TrackingBehindError, ProjectionConflictError):
                raise
            except Exception as error:
                if refused(error):
                    raise ProjectionConflictError(str(error).strip()) from error
                behind = rows_past(self.db, group, start, events)
                if behind is not None:
                    raise behind from error
                raise
            committed = end
        finally:
            batches_ended(group, committed)  # None: what they kept from before is stale
        if ahead is not None and live is not None:
            live.keep_ahead(end, ahead())
        return len(notifications), end

    def _write(self, tx: Tx, group: Sequence[ReadModel], start: int, end: int,
                     events: Sequence[tuple[int, Any]], under_lock: Sequence[ReadModel],
                     later: WritesLater | None, batch_size: int, live: LiveState | None
                     ) -> Callable[[], Sequence[Notification]] | None:
        """Claim the batch from ``start`` to ``end`` for ``group`` in ``tx``, apply it to the
        read models ``under_lock`` and run what ``later`` kept; return the read ahead of the
        next batch, if any (``_read_ahead``).

        Claim first, then apply: the claim runs first in the server, so the claimed rows
        hold a rival runner until this transaction ends, and a runner that read a stale
        position (its batch may overlap what a rival applied, or reach further) commits
        nothing. On PostgreSQL the claim aborts the transaction itself when it is refused
        (``claim_or_abort``), so ``COMMIT`` follows in the same flush and no answer is
        waited for before it: one round trip a busy pass fewer (docs/performance.md, P5).
        On SQLite each statement runs as it is sent, and the claim's answer is checked
        after the apply."""
        names = [read_model.name for read_model in group]
        if tx.dialect is Dialect.POSTGRES:
            claim_or_abort(tx, names, start, end)
            apply_together(tx, under_lock, events)
            return self._read_ahead(tx, end, batch_size, live)
        claimed = claim(tx, names, start, end)
        try:
            apply_together(tx, under_lock, events)
            if later is not None:
                later.run_in(tx)
            ahead = self._read_ahead(tx, end, batch_size, live)
            claimed()
        except ProjectionConflictError:
            raise
        except Exception as error:
            conflict_over(claimed, error)  # a stale runner's apply may fail
            raise
        return ahead

    def _read_ahead(self, tx: Tx, end: int, batch_size: int, live: LiveState | None
                    ) -> Callable[[], Sequence[Notification]] | None:
        """For the background loop, when the source can read the log in ``tx``: send the read
        of the batch after ``end``, last before the commit, so it comes back with the
        commit's answer (a round trip a pass fewer while appends keep coming:
        docs/performance.md, P5); None otherwise."""
        if live is None or not self._reads_in_transaction:
            return None
        return self.source.submit_notifications(tx, end, batch_size)

    def decode(self, notifications: Sequence[Notification]) -> list[tuple[int, Any]]:
        """``(position, domain event)`` pairs of ``notifications``."""
        return [(n.id, self.decoder.to_domain_event(n)) for n in notifications]
