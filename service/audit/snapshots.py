"""Snapshots checked against the log, for ``vmledger audit verify`` (tester B, B1).

A snapshot is an aggregate's state at a version, taken every ``SNAPSHOT_EVERY`` versions
(``service/commands/snapshots.py``). It is outside the hash chain, yet loads start from it:
commands, time travel (``GET /vms/{uuid}?version=``) and the console. An edited snapshot
would change what they see and decide while the chain still held, so the audit folds each
snapshot's stream afresh from its first event and, as the fold reaches each snapshot's
version, compares the two states field by field, type and all (each field's canonical JSON).
A stream is folded once, however many snapshots it has.
"""

from __future__ import annotations

import copy
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from domain.folding import apply_stored, said_fields
from service.audit.verify import Difference
from service.commands.snapshot_seal import SEAL, seal


def verify_snapshots(app: Any) -> list[Difference]:
    """Every stored snapshot that differs from a fresh fold of its stream's events up to
    its version (or that cannot be read, or whose stream cannot be folded that far): one
    ``snapshot`` difference each, naming the stream and the version; in stream then version
    order."""
    differences = []
    for stream in snapshot_streams(app.snapshots.recorder):
        differences += verify_stream_snapshots(app, stream)
    return differences


def verify_stream_snapshots(app: Any, stream: UUID) -> list[Difference]:
    """``verify_snapshots`` for one stream's snapshots (also the console's audit of a VM)."""
    snapshots = app.snapshots.recorder.select_events(stream)  # in version order
    if not snapshots:
        return []
    fold = _Fold(app, stream, last=snapshots[-1].originator_version)
    return [Difference(f"snapshot {stream}", stored.originator_version, "snapshot", problem)
            for stored in snapshots if (problem := _check(app, stored, fold))]


def snapshot_streams(recorder: Any) -> list[UUID]:
    """Every stream with a stored snapshot, in the order of its key in the table."""
    table = recorder.events_table_name
    schema = getattr(recorder.datastore, "schema", None)
    if schema:  # PostgreSQL: the table lives in the configured schema
        from psycopg.sql import Identifier

        table = Identifier(schema, table).as_string()
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute(f"SELECT DISTINCT originator_id FROM {table} ORDER BY originator_id")
        rows = cursor.fetchall()
    return [UUID(str(row["originator_id"])) for row in rows]


class _Fold:
    """One stream's events folded once, in version order, up to ``last``: each
    ``advance_to`` applies the events up to a version and no further, so the aggregate is the
    stream's state at that version (or the last version before it that the stream has)."""

    def __init__(self, app: Any, stream: UUID, *, last: int) -> None:
        self._app, self._stream, self._last = app, stream, last
        self._events: list[StoredEvent] | None = None  # read at the first advance
        self._applied = 0
        self.aggregate: Any = None
        self.error: str | None = None  # once set, the fold goes no further

    def advance_to(self, version: int) -> None:
        """Apply the events after the last applied up to ``version`` (``apply_stored``); an
        error reading or applying one (``UnfoldableEventError`` for an event the fold cannot
        apply) is kept in ``error`` (it holds for every later version too)."""
        if self.error is not None:
            return
        try:
            if self._events is None:
                self._events = self._app.events.recorder.select_events(self._stream,
                                                                       lte=self._last)
            events = self._events
            # the stored version is read before the event is decoded: an event past
            # ``version`` that cannot be read is no finding for the snapshot at ``version``
            while (self._applied < len(events)
                   and events[self._applied].originator_version <= version):
                event = self._app.events.mapper.to_domain_event(events[self._applied])
                # as every fold of stored events: one the VM's fold refuses, or of another
                # aggregate's class (which the library would apply), is the stream's damage
                self.aggregate = apply_stored(event, self.aggregate)
                self._applied += 1
        except Exception as error:  # noqa: BLE001 - a stream that cannot be folded is a finding
            self.error = (f"its stream cannot be folded to this version: "
                          f"{type(error).__name__}: {error}")


def _check(app: Any, stored: StoredEvent, fold: _Fold) -> str | None:
    """What is wrong with the stored snapshot ``stored``, or None; ``fold`` is its stream's,
    advanced here to the snapshot's version."""
    version = stored.originator_version
    try:
        snapshot = app.snapshots.mapper.to_domain_event(stored)
    except Exception as error:  # noqa: BLE001 - an unreadable snapshot is a finding
        return f"the snapshot cannot be read: {type(error).__name__}: {error}"
    fold.advance_to(version)
    if fold.error is not None:
        return fold.error
    aggregate = fold.aggregate
    if aggregate is None or aggregate.version != version:
        reached = aggregate.version if aggregate is not None else 0
        return f"its stream ends at version {reached}, before the snapshot's"
    if snapshot.topic != get_topic(type(aggregate)):
        return f"its topic {snapshot.topic} is not the fold's {get_topic(type(aggregate))}"
    # taken and encoded now: the fold goes on mutating the aggregate for the next snapshot
    fresh = type(snapshot).take(aggregate).state
    # the seal is the snapshot's own (service/commands/snapshot_seal.py), not the aggregate's:
    # the whole state is compared here, which finds more than the seal can
    said, supplied = _as_current(type(aggregate),
                                 {k: v for k, v in snapshot.state.items() if k != SEAL})
    fresh = {k: v for k, v in fresh.items() if k not in supplied}
    have, want = _canonical(app, said), _canonical(app, fresh)
    if have != want:
        fields = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        return f"differs from a fresh fold of its stream in {', '.join(fields)}"
    return _seal_problem(app, snapshot, type(aggregate))


def _seal_problem(app: Any, snapshot: Any, cls: type) -> str | None:
    """What is wrong with the seal of ``snapshot`` (whose state equals a fresh fold), or None.
    A load does not use a snapshot without its seal or with one that does not match
    (service/commands/snapshot_seal.py): its state passed the comparison above while the seal
    loads trust was gone (auditor tester), so either is a finding. A snapshot taken before
    seals has none either: reported alike, as one a load does not use. One an older version of
    its class took is not checked further: a load passes it over before its seal, quietly
    (its upcast can only guess what that version did not keep), and so does the audit."""
    recorded = snapshot.state.get(SEAL)
    if recorded is None:
        return ("it has no seal (removed, or taken before seals): a load does not use it; "
                "take a new snapshot")
    if snapshot.state.get("class_version", 1) < getattr(cls, "class_version", 1):
        return None
    unsealed = copy.copy(snapshot)
    object.__setattr__(unsealed, "state",
                       {k: v for k, v in snapshot.state.items() if k != SEAL})
    if recorded != seal(app.mapper.transcoder, unsealed):
        return "its seal does not match its content: a load does not use it"
    return None


def _as_current(cls: type, state: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """What the snapshot ``state`` (as stored) says, as a load reads it, and the fields it
    never said (``domain.folding.said_fields``): a load upcasts it by ``cls``'s
    ``upcast_vN_vN+1`` methods from the class version it was taken at to ``cls``'s (the
    library's ``Snapshot.mutate``); the fields those upcasts add (a VM's ``state_since``
    before version 2), and ``class_version`` when the snapshot is older, are the fold's
    alone, so they are left out of the comparison; every field the snapshot did say is
    compared, upcast as a load sees it."""
    said, supplied = said_fields(cls, state)
    return said, set(supplied)


def _canonical(app: Any, state: dict[str, Any]) -> dict[str, str]:
    """Each field of ``state`` as the transcoder stores it, in its canonical JSON (sorted
    keys, ``ReusedEncoderTranscoder.canonical``).

    Compared as text, not as decoded values: Python's ``==`` holds ``128 == 128.0`` and
    ``1 == True``, so a resealed snapshot whose values changed only their type passed the
    audit while loads served the edited values (tester D, bug 4)."""
    canonical = app.mapper.transcoder.canonical
    return {key: canonical(value) for key, value in state.items()}
