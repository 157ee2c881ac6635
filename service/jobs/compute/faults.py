"""Faults injected into the simulated fleet, kept in the database so every process (API,
workers) sees them: latency per operation, failure of the next N operations of a kind, a
response lost after the work was done, and pausing every job worker (docs/simulation.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

from projections.db import Database
from service.jobs.compute.driver import ComputeError, OutcomeUnknownError

Operation = Literal["ensure_registered", "ensure_state", "unregister", "inventory",
                    "reconfigure"]
OPERATIONS: tuple[str, ...] = get_args(Operation)
FaultMode = Literal["fail", "lose_response"]

FAULTS_DDL = (
    ("CREATE TABLE IF NOT EXISTS sim_faults (operation TEXT NOT NULL, mode TEXT NOT NULL, "
     "remaining INTEGER NOT NULL, PRIMARY KEY (operation, mode))"),
    "CREATE TABLE IF NOT EXISTS sim_settings (name TEXT PRIMARY KEY, value REAL NOT NULL)",
)


class Faults:
    """Reads and changes the injected faults."""

    def __init__(self, db: Database, *, default_latency_s: float = 0.0):
        self.db = db
        self.default_latency_s = default_latency_s

    def inject(self, operation: str, mode: FaultMode, count: int) -> None:
        """Make the next ``count`` calls of ``operation`` fail (``fail``: before doing
        anything; ``lose_response``: after the work was done, as a timeout would)."""
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO sim_faults (operation, mode, remaining) VALUES (?, ?, ?) "
                "ON CONFLICT (operation, mode) DO UPDATE SET remaining = excluded.remaining",
                (operation, mode, count),
            )

    def clear(self) -> None:
        """Remove every injected failure and latency, and resume the workers."""
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM sim_faults")
            tx.execute("DELETE FROM sim_settings")

    def pending(self) -> list[dict[str, object]]:
        """The failures still to happen."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT operation, mode, remaining FROM sim_faults WHERE remaining > 0 "
                       "ORDER BY operation, mode")
            return tx.fetchall()

    def _setting(self, name: str) -> float | None:
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT value FROM sim_settings WHERE name = ?", (name,))
            row = tx.fetchone()
        return None if row is None else float(row["value"])

    def _set(self, name: str, value: float) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO sim_settings (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )

    def set_latency(self, seconds: float, operation: str | None = None) -> None:
        """The delay of ``operation`` in seconds; without one, of every operation, those
        with a delay of their own included (docs/simulation.md: no ``operation`` means
        every operation; an operation's own delay outranks the fleet-wide one in
        ``latency``, so it is removed, in the same transaction)."""
        if operation is not None:
            self._set(f"latency:{operation}", seconds)
            return
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM sim_settings WHERE name LIKE ?", ("latency:%",))
            tx.execute("INSERT INTO sim_settings (name, value) VALUES ('latency:*', ?)",
                       (seconds,))

    def set_latency_after(self, seconds: float, operation: str) -> None:
        """A delay of ``operation`` after its work is done, before it answers (a slow
        response: the window in which a worker dies after an effect and before recording
        it, for fault runs)."""
        self._set(f"latency_after:{operation}", seconds)

    def latency(self, operation: str, *, after: bool = False) -> float:
        """The delay of ``operation``: its own, else the fleet-wide one, else the default
        (``after``: its delay after the work, 0 unless set)."""
        if after:
            return self._setting(f"latency_after:{operation}") or 0.0
        for name in (f"latency:{operation}", "latency:*"):
            value = self._setting(name)
            if value is not None:
                return value
        return self.default_latency_s

    def pause_workers(self, paused: bool) -> None:
        """Stop (or let again) every job worker from claiming jobs."""
        self._set("workers_paused", 1.0 if paused else 0.0)

    def workers_paused(self) -> bool:
        """Whether job workers are paused."""
        return bool(self._setting("workers_paused"))

    def _take(self, operation: str, mode: str) -> bool:
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE sim_faults SET remaining = remaining - 1 "
                "WHERE operation = ? AND mode = ? AND remaining > 0 RETURNING remaining",
                (operation, mode),
            )
            return tx.fetchone() is not None

    @contextmanager
    def around(self, operation: str) -> Iterator[None]:
        """Wrap one simulated operation: wait its latency, fail it if a failure is due, and
        lose its response (after the work) if that is due."""
        delay = self.latency(operation)
        if delay:
            time.sleep(delay)
        if self._take(operation, "fail"):
            raise ComputeError(f"injected failure of {operation}")
        yield
        delay = self.latency(operation, after=True)
        if delay:
            time.sleep(delay)
        if self._take(operation, "lose_response"):
            raise OutcomeUnknownError(
                f"{operation} timed out (its response was lost after the work)")
