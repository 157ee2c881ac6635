"""The projection runner: pulls the notification log and applies it to read models.

Each read model keeps its own tracking position in ``projection_tracking``; a batch of events
and the new position are written in one transaction, so a crash can neither skip nor
double-apply an event. The position moves by compare-and-set from the position the batch was
read at, before the batch is applied: two runners on the same read model cannot both apply a
batch, nor overlapping ones. A pull loop rather than ``recorder.subscribe()``,
because SQLite has no subscriptions; the same loop serves PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from eventsourcing.persistence import Notification

from projections.db import Database, Tx

TRACKING_DDL = (
    "CREATE TABLE IF NOT EXISTS projection_tracking ("
    "name TEXT PRIMARY KEY, position BIGINT NOT NULL)"
)


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


class ReadModel(ABC):
    """A read model: tables, and how a batch of events changes them."""

    name: str
    tables: tuple[str, ...]

    @abstractmethod
    def create_statements(self, db: Database) -> list[str]:
        """DDL creating the tables (idempotent)."""

    @abstractmethod
    def apply(self, tx: Tx, events: Sequence[tuple[int, Any]]) -> None:
        """Apply ``(position, domain event)`` pairs in log order, inside ``tx``."""


class ProjectionConflictError(Exception):
    """Another runner advanced the read model first; the batch was rolled back."""


class ProjectionRunner:
    """Keeps read models up to date with the log, in batches of ``batch_size`` events."""

    def __init__(
        self,
        db: Database,
        source: NotificationSource,
        decoder: EventDecoder,
        read_models: Iterable[ReadModel],
        *,
        batch_size: int = 500,
    ):
        self.db = db
        self.source = source
        self.decoder = decoder
        self.read_models = {rm.name: rm for rm in read_models}
        self.batch_size = batch_size
        self._wake = threading.Event()
        self._listeners: list[Callable[[], None]] = []

    def create_tables(self) -> None:
        """Create the tracking table and every read model's tables (idempotent)."""
        with self.db.transaction() as tx:
            tx.execute(TRACKING_DDL)
            for read_model in self.read_models.values():
                for statement in read_model.create_statements(self.db):
                    tx.execute(statement)

    def position(self, name: str) -> int:
        """The last log position applied to read model ``name`` (0 before any)."""
        with self.db.transaction(commit=False) as tx:
            return self._position(tx, name)

    def positions(self) -> dict[str, int]:
        """Every read model's position."""
        with self.db.transaction(commit=False) as tx:
            return {name: self._position(tx, name) for name in self.read_models}

    @staticmethod
    def _position(tx: Tx, name: str) -> int:
        tx.execute("SELECT position FROM projection_tracking WHERE name = ?", (name,))
        row = tx.fetchone()
        return 0 if row is None else int(row["position"])

    def head(self) -> int:
        """The log's last position (0 when empty)."""
        return self.source.max_notification_id() or 0

    def run_once(self, name: str) -> int:
        """Apply the next batch to read model ``name``; return how many events it held."""
        read_model = self.read_models[name]
        start = self.position(name)
        notifications = self.source.select_notifications(
            start, self.batch_size, inclusive_of_start=False
        )
        if not notifications:
            return 0
        events = [(n.id, self.decoder.to_domain_event(n)) for n in notifications]
        with self.db.transaction() as tx:
            # Claim first, then apply: a runner that read a stale position (its batch may
            # overlap what a rival applied, or reach further) applies nothing, and on
            # PostgreSQL the claimed row holds a rival runner until this transaction ends.
            self._advance(tx, name, start, notifications[-1].id)
            read_model.apply(tx, events)
        return len(notifications)

    @staticmethod
    def _advance(tx: Tx, name: str, start: int, position: int) -> None:
        """Move ``name`` from exactly ``start`` to ``position``, or raise
        ``ProjectionConflictError`` (another runner moved it first)."""
        tx.execute(
            "INSERT INTO projection_tracking (name, position) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position "
            "WHERE projection_tracking.position = ? RETURNING position",
            (name, position, start),
        )
        if tx.fetchone() is None:
            raise ProjectionConflictError(
                f"{name}: another runner moved the position past {start} first"
            )

    def catch_up(self, names: Iterable[str] | None = None,
                 progress: Callable[[int], None] | None = None) -> int:
        """Apply batches until the named read models (all by default) reach the head."""
        total = 0
        for name in names or list(self.read_models):
            while True:
                count = self.run_once(name)
                if not count:
                    break
                total += count
                if progress:
                    progress(count)
        if total:
            self._notify()
        return total

    def reset(self, names: Iterable[str]) -> None:
        """Empty the named read models and their positions, in one transaction."""
        with self.db.transaction() as tx:
            for name in names:
                for table in self.read_models[name].tables:
                    tx.execute(f"DELETE FROM {table}")  # table names are ours, not input
                tx.execute("DELETE FROM projection_tracking WHERE name = ?", (name,))

    def rebuild(self, names: Iterable[str] | None = None,
                progress: Callable[[int], None] | None = None) -> int:
        """Throw the named read models away and replay them from position 1."""
        chosen = list(names or self.read_models)
        self.reset(chosen)
        return self.catch_up(chosen, progress)

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

    def run_forever(self, stop: threading.Event, poll_s: float,
                    on_error: Callable[[BaseException], None] | None = None) -> None:
        """Catch up, then wait for a wake-up or ``poll_s``, until ``stop`` is set."""
        while not stop.is_set():
            self._wake.clear()
            try:
                self.catch_up()
            except ProjectionConflictError:
                continue  # another runner applied it; read the new position and go on
            except Exception as error:  # noqa: BLE001 - keep serving; report and retry
                if on_error:
                    on_error(error)
                stop.wait(poll_s)
                continue
            self._wake.wait(poll_s)

    def wait_for(self, position: int, names: Iterable[str], timeout: float,
                 interval: float = 0.005) -> bool:
        """Wait until the named read models reach ``position``; False on timeout."""
        deadline = time.monotonic() + timeout
        names = list(names)
        while True:
            positions = self.positions()
            if all(positions.get(name, 0) >= position for name in names):
                return True
            if time.monotonic() >= deadline:
                return False
            self.wake()
            time.sleep(interval)
