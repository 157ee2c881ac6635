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
