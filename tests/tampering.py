"""Edits to the stored log behind the service's back, as an intruder (or a bad repair) would
make them: SQL on the event store's and the snapshot store's tables, as each backend names
them and keys their streams."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from projections.db import Dialect


def events_table(services: Any, vm_uuid: str) -> tuple[str, str]:
    """The event store's table and the stream's key in it, as each backend stores them."""
    if services.db.dialect is Dialect.SQLITE:
        return "stored_events", UUID(vm_uuid).hex
    return "vmledger_events", vm_uuid


def snapshots_table(services: Any, vm_uuid: str) -> tuple[str, str]:
    """The snapshot store's table and the stream's key in it."""
    if services.db.dialect is Dialect.SQLITE:
        return "stored_snapshots", UUID(vm_uuid).hex
    return "vmledger_snapshots", vm_uuid


def set_event_column(services: Any, vm_uuid: str, version: int, column: str,
                     value: Any) -> None:
    """Overwrite ``column`` (``topic``, ``state``) of the stream's event at ``version``."""
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"UPDATE {table} SET {column} = ? WHERE originator_id = ? "
                   "AND originator_version = ?", (value, stream, version))


def edit_event_bytes(services: Any, vm_uuid: str, version: int, old: bytes,
                     new: bytes) -> None:
    """Replace ``old`` (which must be there) by ``new`` in the stored state of the stream's
    event at ``version``."""
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"SELECT state FROM {table} WHERE originator_id = ? AND originator_version = ?",
                   (stream, version))
        state = bytes(tx.fetchone()["state"])
        assert old in state
        tx.execute(f"UPDATE {table} SET state = ? WHERE originator_id = ? "
                   "AND originator_version = ?", (state.replace(old, new), stream, version))


def delete_event(services: Any, vm_uuid: str, version: int) -> None:
    """Remove the stream's event at ``version``, leaving a gap."""
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"DELETE FROM {table} WHERE originator_id = ? AND originator_version = ?",
                   (stream, version))


def delete_stream(services: Any, vm_uuid: str) -> None:
    """Remove every event of the stream (its snapshots stay)."""
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"DELETE FROM {table} WHERE originator_id = ?", (stream,))


def edit_snapshot(services: Any, vm_uuid: str, old: bytes, new: bytes,
                  version: int | None = None) -> None:
    """Replace ``old`` (which must be there) by ``new`` in the stored bytes of the VM's
    snapshot (the one at ``version``, when the stream has several)."""
    table, stream = snapshots_table(services, vm_uuid)
    where, key = "originator_id = ?", (stream,)
    if version is not None:
        where, key = where + " AND originator_version = ?", (stream, version)
    with services.db.transaction() as tx:
        tx.execute(f"SELECT state FROM {table} WHERE {where}", key)
        [row] = tx.fetchall()
        state = bytes(row["state"])
        assert old in state
        tx.execute(f"UPDATE {table} SET state = ? WHERE {where}", (state.replace(old, new), *key))


def swap_versions(services: Any, vm_uuid: str, first: int, second: int) -> None:
    """Swap the versions of the stream's events ``first`` and ``second`` (each keeps its
    position and content), through a temporary negative version."""
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        for old, new in ((first, -first), (second, first), (-first, second)):
            tx.execute(f"UPDATE {table} SET originator_version = ? WHERE originator_id = ? "
                       "AND originator_version = ?", (new, stream, old))


def move_event(services: Any, from_vm: str, version: int, to_vm: str, as_version: int
               ) -> None:
    """Move ``from_vm``'s event at ``version`` into ``to_vm``'s stream as ``as_version`` (it
    keeps its position and content)."""
    table, source = events_table(services, from_vm)
    _, target = events_table(services, to_vm)
    with services.db.transaction() as tx:
        tx.execute(f"UPDATE {table} SET originator_id = ?, originator_version = ? "
                   "WHERE originator_id = ? AND originator_version = ?",
                   (target, as_version, source, version))


def cast_event_column(services: Any, vm_uuid: str, version: int, column: str, kind: str
                      ) -> None:
    """Store ``column`` of the stream's event at ``version`` as SQLite type ``kind`` (``text``,
    ``blob``) with its content unchanged, as a plain edit in the sqlite3 shell does (SQLite
    keeps any type in any column; PostgreSQL's columns refuse it)."""
    assert services.db.dialect is Dialect.SQLITE
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"UPDATE {table} SET {column} = CAST({column} AS {kind}) "
                   "WHERE originator_id = ? AND originator_version = ?", (stream, version))


def position_column(services: Any) -> str:
    """The event store's column of an event's log position."""
    return "rowid" if services.db.dialect is Dialect.SQLITE else "notification_id"


def positions(services: Any, vm_uuid: str) -> dict[int, int]:
    """The log position of each of the stream's events, by version."""
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"SELECT originator_version AS version, {position_column(services)} AS at "
                   f"FROM {table} WHERE originator_id = ?", (stream,))
        return {row["version"]: row["at"] for row in tx.fetchall()}


def set_positions(services: Any, vm_uuid: str, moves: dict[int, int]) -> None:
    """Give the stream's events the log positions ``moves`` (version → position), in one
    transaction, each through a free position past the log's head first (so two events may
    trade positions)."""
    table, stream = events_table(services, vm_uuid)
    column = position_column(services)
    with services.db.transaction() as tx:
        tx.execute(f"SELECT MAX({column}) AS head FROM {table}")
        spare = tx.fetchone()["head"] + 1_000_000
        for step in (lambda version, _: spare + version, lambda _, position: position):
            for version, position in moves.items():
                tx.execute(f"UPDATE {table} SET {column} = ? WHERE originator_id = ? "
                           "AND originator_version = ?", (step(version, position), stream,
                                                          version))
