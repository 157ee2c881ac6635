"""``audit verify`` on a stream with several snapshots: the stream is folded once, each
snapshot compared as the fold reaches its version, and each finding names only its own
snapshot."""

from __future__ import annotations

import json
from uuid import UUID

from eventsourcing.domain import CanSnapshotAggregate

from domain.vm import Vm
from service.audit.snapshots import _as_current, verify_snapshots, verify_stream_snapshots
from service.commands.snapshot_seal import SEAL
from tests.integration.test_audit import _vm_with_history
from tests.tampering import delete_event, edit_snapshot, snapshots_table


def _snapshots_at(services, vm_uuid: str, versions: list[int]) -> None:
    for version in versions:
        services.app.take_snapshot(UUID(vm_uuid), version=version)


def _stream_reads(services, monkeypatch) -> list[UUID]:
    """The streams the event store's recorder is asked for, one entry per read."""
    recorder = services.app.events.recorder
    select_events = recorder.select_events
    reads: list[UUID] = []

    def counted(originator_id, **kwargs):
        reads.append(originator_id)
        return select_events(originator_id, **kwargs)

    monkeypatch.setattr(recorder, "select_events", counted)
    return reads


def test_one_edited_snapshot_among_good_ones_is_the_one_finding(services):
    vm_uuid = _vm_with_history(services)
    other = _vm_with_history(services)
    head = services.commands.load(vm_uuid).version
    versions = [2, 3, 4, head]
    assert head > 4, "the history is too short for four snapshots"
    _snapshots_at(services, vm_uuid, versions)
    _snapshots_at(services, other, versions)
    assert verify_snapshots(services.app) == []
    edit_snapshot(services, vm_uuid, b'"ram":256', b'"ram":99999', version=3)
    found = verify_snapshots(services.app)
    assert [(d.where, d.version, d.kind) for d in found] == [
        (f"snapshot {vm_uuid}", 3, "snapshot")]
    assert "ram" in found[0].detail
    assert verify_stream_snapshots(services.app, UUID(other)) == []


def test_each_stream_is_read_once_however_many_snapshots_it_has(services, monkeypatch):
    streams = [_vm_with_history(services) for _ in range(2)]
    for vm_uuid in streams:
        _snapshots_at(services, vm_uuid, [2, 3, 4, 5])
    reads = _stream_reads(services, monkeypatch)
    assert verify_snapshots(services.app) == []
    assert sorted(reads) == sorted(UUID(vm_uuid) for vm_uuid in streams)


def test_a_gap_between_snapshots_is_a_finding_for_those_after_it_only(services):
    vm_uuid = _vm_with_history(services)
    _snapshots_at(services, vm_uuid, [2, 3, 5, 6])
    delete_event(services, vm_uuid, 4)
    found = verify_snapshots(services.app)
    assert [(d.version, d.kind) for d in found] == [(5, "snapshot"), (6, "snapshot")]
    # the one event the fold cannot apply, named for each snapshot after the gap
    assert found[0].detail == found[1].detail
    assert found[0].detail.startswith("its stream cannot be folded to this version: ")


def test_a_snapshot_past_the_streams_end_names_where_the_stream_ends(services):
    vm_uuid = _vm_with_history(services)
    head = services.commands.load(vm_uuid).version
    _snapshots_at(services, vm_uuid, [2, head])
    delete_event(services, vm_uuid, head)
    found = verify_snapshots(services.app)
    assert [(d.version, d.detail) for d in found] == [
        (head, f"its stream ends at version {head - 1}, before the snapshot's")]


def _as_version_one_took_it(services, vm_uuid: str) -> None:
    """Rewrite the VM's snapshot as a Vm of class version 1 stored it: no ``state_since`` nor
    ``lost_copy`` (kept since version 2), and no ``class_version``."""
    transcoder = services.app.snapshots.mapper.transcoder
    table, stream = snapshots_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"SELECT state FROM {table} WHERE originator_id = ?", (stream,))
        [row] = tx.fetchall()
        stored = transcoder.decode(bytes(row["state"]))  # the snapshot: topic, state, timestamp
        for added in ("state_since", "lost_copy", "class_version"):
            del stored["state"][added]
        tx.execute(f"UPDATE {table} SET state = ? WHERE originator_id = ?",
                   (transcoder.encode(stored), stream))


def test_a_snapshot_an_older_vm_took_is_compared_on_what_it_said(services):
    vm_uuid = _vm_with_history(services)
    _snapshots_at(services, vm_uuid, [3])
    _as_version_one_took_it(services, vm_uuid)
    # the fold's state_since is no finding against a snapshot that never said it
    assert verify_snapshots(services.app) == []
    # but every field it did say is still compared
    edit_snapshot(services, vm_uuid, b'"ram":256', b'"ram":99999')
    [found] = verify_snapshots(services.app)
    assert found.detail == "differs from a fresh fold of its stream in ram"


def test_the_audits_upcast_of_an_old_snapshot_agrees_with_the_librarys_load(services):
    # _as_current restates the upcast loop of eventsourcing 9.5's Snapshot.mutate: were the
    # library's to change, the audit would compare a state no load reads
    vm_uuid = _vm_with_history(services)
    _snapshots_at(services, vm_uuid, [3])
    _as_version_one_took_it(services, vm_uuid)
    [stored] = services.app.snapshots.recorder.select_events(UUID(vm_uuid))
    snapshot = services.app.snapshots.mapper.to_domain_event(stored)
    assert type(snapshot).mutate is CanSnapshotAggregate.mutate  # the library's own load
    state = {k: v for k, v in snapshot.state.items() if k != SEAL}
    assert "class_version" not in state  # as a Vm of class version 1 stored it
    loaded = vars(snapshot.mutate(None))
    library = {k: v for k, v in loaded.items()
               if k not in {"_id", "_version", "_pending_events", SEAL}}
    said, supplied = _as_current(Vm, state)
    # what the snapshot said, upcast, is what the library's load holds
    assert said == {k: v for k, v in library.items() if k in said}
    # and the fields only the upcasts supply are the rest of it (class_version: the class's)
    assert supplied == set(library) - set(said) | {"class_version"}
    assert {k: library[k] for k in supplied - {"class_version"}} == {
        "state_since": None, "lost_copy": None}


def test_a_snapshot_whose_seal_was_removed_or_edited_is_a_finding(services):
    """A load does not use a snapshot without its seal, or with a seal that does not match
    (service/commands/snapshot_seal.py), so its state passed the audit's comparison while the
    seal that loads trust was gone (auditor tester)."""
    vm_uuid = _vm_with_history(services)
    _snapshots_at(services, vm_uuid, [2, 3])
    assert verify_snapshots(services.app) == []
    table, stream = snapshots_table(services, vm_uuid)
    for version, edit in ((2, lambda state: state.pop(SEAL)),
                          (3, lambda state: state.update({SEAL: "0" * 64}))):
        with services.db.transaction() as tx:
            tx.execute(f"SELECT state FROM {table} WHERE originator_id = ? "
                       "AND originator_version = ?", (stream, version))
            stored = json.loads(bytes(tx.fetchone()["state"]))
            edit(stored["state"])  # the snapshot's state, within the stored envelope
            tx.execute(f"UPDATE {table} SET state = ? WHERE originator_id = ? "
                       "AND originator_version = ?", (json.dumps(stored).encode(), stream, version))
    found = verify_snapshots(services.app)
    assert [(d.where, d.version, d.kind) for d in found] == [
        (f"snapshot {vm_uuid}", 2, "snapshot"), (f"snapshot {vm_uuid}", 3, "snapshot")]
    assert "no seal" in found[0].detail
    assert "seal does not match" in found[1].detail
