"""Audit verify for chosen VMs: the same two checks as ``vmledger audit verify``
(``service/audit/verify.py``), for a few streams at a time, so that the web console can run
them from a page for one VM, or for the fleet a page of VMs at a time, in bounded time.

For each VM: its stream's versions are contiguous from 1, every event's hash ``chain``
holds and every snapshot of it equals a fresh fold (``service/audit/snapshots.py``); and the VM's rows in every read model built from VM streams (``vm_view`` with its
tags, ``job_view``, the analytics tables, ``volume_mounts``) equal a fresh fold of its stream
(merged, for ``volume_mounts``, with the streams of the volumes it mounts), each fold stopped
at the position the live read model has reached, whose rows are read in the same snapshot.
That snapshot is read first and the streams after it (the log only grows), so an event
appended meanwhile is past every fold's stop: read the other way round, a busy VM's rows held
events its fold had not read and were reported as differing (console tester, bug 1).
``server_view`` holds servers' streams, not VMs', and is left to the full verify.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification

from domain.vm import FIRST_TOPICS
from service.audit.chains import ChainCheck
from service.audit.snapshots import verify_stream_snapshots
from service.audit.verify import Difference, comparable, compare, scratch_directory
from service.storage import select_stream

MAX_PAGE = 200  # VMs in one fleet page: about a second of work on this machine
MAX_EVENTS = 100_000  # events read of one stream (a VM has tens)
# table -> (the column naming the VM, the columns keying a row)
VM_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "vm_view": ("uuid", ("uuid",)),
    "vm_view_tags": ("vm_uuid", ("vm_uuid", "key")),
    "job_view": ("vm_uuid", ("uuid",)),
    "vm_transitions": ("vm_uuid", ("vm_uuid", "version")),
    "vm_current": ("vm_uuid", ("vm_uuid",)),
    "volume_mounts": ("vm_uuid", ("vm_uuid", "mountpoint")),
}


@dataclass
class VmAudit:
    """What verify found for one VM: how many events its stream has, and the differences
    (``chain``: the stream; ``read_models``: its rows), each naming where and the version."""

    vm_uuid: str
    events: int = 0
    position: int | None = None  # the log position of its last event
    chain: list[Difference] = field(default_factory=list)
    read_models: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Chain intact and read models equal to a fresh fold."""
        return not self.chain and not self.read_models


def verify_vms(services: Any, vm_uuids: Iterable[str]) -> list[VmAudit]:
    """Verify the VMs ``vm_uuids`` (in that order). A uuid with no VM stream is reported as
    a ``missing`` difference (and its read-model rows, if any, as absent from a fresh fold)."""
    app = services.app
    vm_uuids = list(vm_uuids)
    models = _vm_models(app.mapper.transcoder)
    # first the read models (positions and rows, one snapshot), then the streams
    live = _live_rows(services.db, models, vm_uuids, app.mapper.transcoder)
    audits: list[VmAudit] = []
    streams: dict[str, list[Notification]] = {}
    for vm_uuid in vm_uuids:
        audit = VmAudit(vm_uuid)
        audits.append(audit)
        try:
            events = list(select_stream(app.recorder, UUID(vm_uuid), 0, MAX_EVENTS))
        except ValueError:
            events = []
        if not events or not events[0].topic.startswith("vm."):
            audit.chain.append(Difference(f"stream {vm_uuid}", 1, "missing",
                                          "the log has no VM stream of this uuid"))
            events = []
        check = ChainCheck(app)
        for stored in sorted(events, key=lambda stored: stored.id):  # in log order
            check.add(stored)
        audit.chain += check.findings()
        if events:  # what a load may start from, as the whole verify checks it
            audit.chain += verify_stream_snapshots(app, UUID(vm_uuid))
        audit.events = len(events)
        audit.position = events[-1].id if events else None
        streams[vm_uuid] = events
    by_vm = {audit.vm_uuid: audit for audit in audits}
    for difference in _read_model_differences(services, streams, models, live):
        by_vm[difference[0]].read_models.append(difference[1])
    return audits


def fleet_page(services: Any, *, after: int = 0, limit: int = 50
               ) -> tuple[list[VmAudit], int | None]:
    """Verify the next ``limit`` VMs (at most ``MAX_PAGE``) in the order they were created
    (through the API or found by their agent: ``FIRST_TOPICS``), after log position
    ``after`` (0: from the first); returns their audits and the position to continue after
    (None when no VM was created later). Each page reads only its VMs'
    streams, so any fleet is verified in bounded steps."""
    limit = max(1, min(limit, MAX_PAGE))
    created = services.app.recorder.select_notifications(
        after, limit + 1, topics=list(FIRST_TOPICS), inclusive_of_start=False)
    page = created[:limit]
    audits = verify_vms(services, [str(n.originator_id) for n in page])
    return audits, (page[-1].id if len(created) > limit else None)


def _vm_models(transcoder: Any) -> list[Any]:
    """The read models with a VM table (``VM_TABLES``)."""
    from service.container import read_models

    return [m for m in read_models(transcoder) if set(m.tables) & set(VM_TABLES)]


def _read_model_differences(services: Any, streams: dict[str, list[Notification]],
                            models: list[Any], live_snapshot: tuple[dict[str, int], Any]
                            ) -> list[tuple[str, Difference]]:
    """(vm_uuid, difference) for every VM row of the VM read models ``models`` (their
    positions and rows ``live_snapshot``, read before ``streams``) that differs from a
    fresh fold of the VMs' streams, each stopped at its model's position; for a VM whose stream a fresh fold cannot apply (an event
    undecodable, deleted, moved, or refused by the fold), one ``fold`` difference naming the
    version and the read models instead of its rows, as ``vmledger audit verify`` reports it
    (``service.audit.read_models``): the page exists to report damaged streams, and answered
    them 500 or 503, failing a fleet page whole (auditor tester)."""
    from eventsourcing.sqlite import SQLiteDatastore

    from projections.db import Database
    from service.audit.read_models import Broken, apply_finding_broken

    transcoder = services.app.mapper.transcoder
    uuids = list(streams)
    live_positions, live = live_snapshot
    broken: Broken = {}
    events = _merged(services.app, streams, broken)
    directory = scratch_directory()
    datastore = SQLiteDatastore(str(directory / "fresh.db"))
    found: list[tuple[str, Difference]] = []
    try:
        scratch = Database(datastore)
        for model in models:
            stop = live_positions[model.name]
            with scratch.transaction() as tx:
                for statement in model.create_statements(scratch):
                    tx.execute(statement)
            apply_finding_broken(model, scratch, [(p, e) for p, e in events if p <= stop],
                                 broken)
        _, fresh = _live_rows(scratch, models, uuids, transcoder, positions=False)
        for vm_uuid in uuids:
            damage = broken.get(UUID(vm_uuid))
            if damage is not None:
                version, names, error = damage
                found.append((vm_uuid, Difference(
                    f"stream {vm_uuid}", version, "fold",
                    f"a fresh fold of {', '.join(names)} failed: {error}; its rows are not "
                    "compared")))
                continue
            for table in live:
                for difference in compare(table, live[table].get(vm_uuid, {}),
                                          fresh[table].get(vm_uuid, {})):
                    found.append((vm_uuid, difference))
    finally:
        datastore.close()
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()
    return found


def _merged(app: Any, streams: dict[str, list[Notification]], broken: Any
            ) -> list[tuple[int, Any]]:
    """The VMs' events and those of the volumes they mount, decoded, in log order; a stream
    with an event that cannot be decoded goes into ``broken`` from that version on."""
    from service.audit.read_models import break_stream

    decoded: dict[int, Any] = {}
    volumes: set[str] = set()
    # those at positions outside the log are left out, as the log's reads by position
    # (``vmledger audit verify``'s fold) leave them: their streams then have a gap
    stored_events = [stored for events in streams.values() for stored in events
                     if stored.id >= 1]
    for stored in stored_events:
        event = _decoded(app, stored, broken, break_stream)
        if event is None:
            continue
        decoded[stored.id] = event
        if stored.originator_version == 1:
            volumes |= {m["volume_uuid"] for m in getattr(event, "volumes", None) or []
                        if isinstance(m, dict) and "volume_uuid" in m}
    for volume_uuid in sorted(volumes):
        try:
            volume_id = UUID(str(volume_uuid))
        except ValueError:
            continue
        for stored in select_stream(app.recorder, volume_id, 0, MAX_EVENTS):
            event = _decoded(app, stored, broken, break_stream)
            if event is not None:
                decoded[stored.id] = event
    return sorted(decoded.items(), key=lambda item: item[0])


def _decoded(app: Any, stored: Notification, broken: Any, break_stream: Any) -> Any:
    """``stored`` decoded, or None (its stream then in ``broken``)."""
    if stored.originator_id in broken:
        return None
    try:
        return app.mapper.to_domain_event(stored)
    except Exception as error:  # noqa: BLE001 - an undecodable event is a finding
        break_stream(broken, "every read model", stored.originator_id,
                     stored.originator_version, error)
        return None


def _live_rows(db: Any, models: list[Any], uuids: list[str], transcoder: Any, *,
               positions: bool = True
               ) -> tuple[dict[str, int], dict[str, dict[str, dict[str, dict[str, Any]]]]]:
    """Each model's tracking position, and the VMs' rows of every VM table: table → vm_uuid →
    key → row (``comparable``), all read in one snapshot of the database."""
    from projections.runner import ProjectionRunner
    from service.audit.read_models import one_snapshot

    rows: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    found: dict[str, int] = {}
    marks = ", ".join("?" * len(uuids)) or "NULL"
    with one_snapshot(db) as tx:
        for model in models:
            if positions:
                found[model.name] = ProjectionRunner.position_in(tx, model.name)
            for table in model.tables:
                if table not in VM_TABLES:
                    continue
                column, key = VM_TABLES[table]
                tx.execute(f"SELECT * FROM {table} WHERE {column} IN ({marks})", uuids)
                per_vm = rows.setdefault(table, {})
                for row in tx.fetchall():
                    plain = comparable(row, transcoder)
                    per_vm.setdefault(row[column], {})["/".join(
                        str(row[c]) for c in key)] = plain
    return found, rows
