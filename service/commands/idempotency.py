"""Idempotency keys (api.md, "Concurrency and idempotency").

A key is recorded in the SAME transaction as the events its command appended (the ledger
recorders insert the row in their ``_insert_events`` hook), so a crash can never keep one
without the other. The same key with the same request returns the first outcome and appends
nothing; with a different request it is refused. Keys expire after ``ttl_s`` (≥ 24 h by default).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from domain.json_input import cut
from projections.db import Database, Dialect, Tx

DDL = (
    "CREATE TABLE IF NOT EXISTS idempotency_keys ("
    "scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, "
    "status INTEGER NOT NULL, outcome TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (scope, key))"
)


class IdempotencyKeyReusedError(Exception):
    """The key was already used for a different request (422 ``IdempotencyKeyReused``)."""

    def __init__(self, key: str):
        # a key may be 255 characters: a message repeats at most ECHOED of them (api.md)
        super().__init__(f"Idempotency-Key '{cut(key)}' was already used for a different "
                         "request")
        self.key = key


@dataclass(frozen=True)
class IdempotencyKey:
    """A client's key, who sent it (``scope``) and a fingerprint of the request it names;
    ``older``, the fingerprints earlier versions of the service gave the same request
    (service/api/fingerprints.py): a key stored then, within its ``ttl_s``, still names this
    request."""

    scope: str
    key: str
    fingerprint: str
    older: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recorded:
    """The outcome of a command on a volume, network or server, whose route answers with the
    resource (``status``, its uuid and version after the command): what an
    ``Idempotency-Key`` remembers of it, so that a repeat is answered with that status and
    the resource, appending nothing."""

    uuid: str
    status: int
    version: int


def remembered(status: int) -> Callable[[Any, Any], Recorded]:
    """The ``outcome`` (``Changes.change``) a key keeps of a command on a volume, network or
    server: the route's ``status``, the resource and its version."""
    return lambda _decision, aggregate: Recorded(str(aggregate.id), status, aggregate.version)


@dataclass(frozen=True)
class KeyRecord:
    """What is stored for a key: the first outcome of its request."""

    key: IdempotencyKey
    status: int
    outcome: dict[str, Any]
    created_at: float


class IdempotencyStore:
    """Looks keys up, and writes them inside the event store's transactions."""

    def __init__(self, db: Database, *, ttl_s: float, clock: Callable[[], float] = time.time):
        self.db = db
        self.ttl_s = ttl_s
        self.clock = clock

    def create_tables(self) -> None:
        """Create the keys table (idempotent)."""
        with self.db.transaction() as tx:
            tx.execute(DDL)

    def find(self, key: IdempotencyKey) -> dict[str, Any] | None:
        """The first outcome recorded for ``key`` (with ``status``), or None if none or
        expired. Raises ``IdempotencyKeyReusedError`` when it named another request."""
        with self.db.transaction(commit=False) as tx:
            tx.execute(
                "SELECT fingerprint, status, outcome, created_at FROM idempotency_keys "
                "WHERE scope = ? AND key = ?",
                (key.scope, key.key),
            )
            row = tx.fetchone()
        if row is None or row["created_at"] < self.clock() - self.ttl_s:
            return None
        if row["fingerprint"] != key.fingerprint and row["fingerprint"] not in key.older:
            raise IdempotencyKeyReusedError(key.key)
        return {"status": row["status"], **json.loads(row["outcome"])}

    def record(self, key: IdempotencyKey, status: int, outcome: Any) -> KeyRecord:
        """The row to store with the command's events (``outcome`` a dataclass)."""
        return KeyRecord(key, status, asdict(outcome), self.clock())

    def insert_alone(self, record: KeyRecord) -> None:
        """Store a key whose command appended nothing (its own transaction)."""
        with self.db.transaction() as tx:
            insert(tx, record, expired_before=record.created_at - self.ttl_s)


def insert(tx: Tx, record: KeyRecord, *, expired_before: float) -> None:
    """Insert ``record`` in ``tx``, replacing an expired row; an unexpired row with the same
    key makes the insert (and so the whole transaction) fail with a uniqueness violation."""
    key = record.key
    tx.execute(
        "DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND created_at < ?",
        (key.scope, key.key, expired_before),
    )
    tx.execute(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, status, outcome, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (key.scope, key.key, key.fingerprint, record.status, json.dumps(record.outcome),
         record.created_at),
    )


def insert_in_recorder(cursor: Any, dialect: Dialect, kwargs: dict[str, Any]) -> None:
    """The recorders' hook: store the ``idempotency`` keyword argument of ``app.save``."""
    record: KeyRecord | None = kwargs.get("idempotency")
    if record is not None:
        insert(Tx(cursor, dialect), record, expired_before=kwargs["idempotency_expired_before"])
