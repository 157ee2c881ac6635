"""Snapshots checked against the log, for ``vmledger audit verify`` (tester B, B1).

A snapshot is an aggregate's state at a version, taken every ``SNAPSHOT_EVERY`` versions
(``service/commands/snapshots.py``). It is outside the hash chain, yet loads start from it:
commands, time travel (``GET /vms/{uuid}?version=``) and the console. An edited snapshot
would change what they see and decide while the chain still held, so the audit folds each
snapshot's stream afresh from its first event up to the snapshot's version and compares the
two states field by field, type and all (each field's canonical JSON).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from eventsourcing.utils import get_topic

from service.audit.verify import Difference
from service.commands.snapshot_seal import SEAL


def verify_snapshots(app: Any) -> list[Difference]:
    """Every stored snapshot that differs from a fresh fold of its stream's events up to
    its version (or that cannot be read, or whose stream cannot be folded that far): one
    ``snapshot`` difference each, naming the stream and the version."""
    differences = []
    for stream, version in stored_snapshots(app.snapshots.recorder):
        problem = _check(app, stream, version)
        if problem:
            differences.append(Difference(f"snapshot {stream}", version, "snapshot", problem))
    return differences


def verify_stream_snapshots(app: Any, stream: UUID) -> list[Difference]:
    """``verify_snapshots`` for one stream's snapshots (the console's audit of a VM)."""
    versions = [stored.originator_version
                for stored in app.snapshots.recorder.select_events(stream)]
    return [Difference(f"snapshot {stream}", version, "snapshot", problem)
            for version in versions if (problem := _check(app, stream, version))]


def stored_snapshots(recorder: Any) -> Iterator[tuple[UUID, int]]:
    """(stream, version) of every stored snapshot, in stream then version order."""
    table = recorder.events_table_name
    schema = getattr(recorder.datastore, "schema", None)
    if schema:  # PostgreSQL: the table lives in the configured schema
        from psycopg.sql import Identifier

        table = Identifier(schema, table).as_string()
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute(f"SELECT originator_id, originator_version FROM {table} "
                       "ORDER BY originator_id, originator_version")
        rows = cursor.fetchall()
    for row in rows:
        yield UUID(str(row["originator_id"])), int(row["originator_version"])


def _check(app: Any, stream: UUID, version: int) -> str | None:
    """What is wrong with the snapshot of ``stream`` at ``version``, or None."""
    try:
        [snapshot] = app.snapshots.get(stream, lte=version, desc=True, limit=1)
    except Exception as error:  # noqa: BLE001 - an unreadable snapshot is a finding
        return f"the snapshot cannot be read: {type(error).__name__}: {error}"
    aggregate = None
    try:
        for event in app.events.get(stream, lte=version):
            aggregate = event.mutate(aggregate)
    except Exception as error:  # noqa: BLE001 - a stream that cannot be folded is a finding
        return f"its stream cannot be folded to this version: {type(error).__name__}: {error}"
    if aggregate is None or aggregate.version != version:
        reached = aggregate.version if aggregate is not None else 0
        return f"its stream ends at version {reached}, before the snapshot's"
    if snapshot.topic != get_topic(type(aggregate)):
        return f"its topic {snapshot.topic} is not the fold's {get_topic(type(aggregate))}"
    fresh = type(snapshot).take(aggregate).state
    # the seal is the snapshot's own (service/commands/snapshot_seal.py), not the aggregate's:
    # the whole state is compared here, which finds more than the seal can
    stored = {k: v for k, v in snapshot.state.items() if k != SEAL}
    have, want = _canonical(app, stored), _canonical(app, fresh)
    if have != want:
        fields = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        return f"differs from a fresh fold of its stream in {', '.join(fields)}"
    return None


def _canonical(app: Any, state: dict[str, Any]) -> dict[str, str]:
    """Each field of ``state`` as the transcoder stores it, in canonical JSON (sorted keys).

    Compared as text, not as decoded values: Python's ``==`` holds ``128 == 128.0`` and
    ``1 == True``, so a resealed snapshot whose values changed only their type passed the
    audit while loads served the edited values (tester D, bug 4)."""
    encoded = json.loads(app.mapper.transcoder.encode(state))
    return {key: json.dumps(value, sort_keys=True, separators=(",", ":"))
            for key, value in encoded.items()}
