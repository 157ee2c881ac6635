"""``audit verify`` beyond the chain (tester B, B1-B5): stored snapshots are checked against a
fresh fold, the whole log is folded (not only up to the read models' position), rows are
keyed by their primary key on both sides, and one stream that cannot be folded is the one
finding rather than every row of its read model."""

from __future__ import annotations

import json
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent

from domain import chain
from domain.vm import Vm, make_cause
from projections.db import Dialect
from service.commands.application import VmSpec
from service.audit.snapshots import verify_snapshots
from service.audit.read_models import verify_read_models
from service.audit.verify import stored_fields, verify_chains
from tests.cli import vmledger
from tests.integration.test_audit import OWNER, _version_of, _vm_with_history
from tests.tampering import (
    delete_event, edit_snapshot, events_table, move_event, set_event_column, swap_versions,
)


def test_an_untouched_snapshot_verifies_and_an_edited_one_is_named(services):
    vm_uuid = _vm_with_history(services)
    other = _vm_with_history(services)
    version = _version_of(services, vm_uuid, Vm.MetadataUpdated)
    for uuid in (vm_uuid, other):
        services.app.take_snapshot(UUID(uuid), version=version)
    assert verify_snapshots(services.app) == []
    edit_snapshot(services, vm_uuid, b'"ram":256', b'"ram":99999')
    found = verify_snapshots(services.app)
    assert [(d.where, d.version, d.kind) for d in found] == [
        (f"snapshot {vm_uuid}", version, "snapshot")]
    assert "ram" in found[0].detail


def _append_unfoldable_event(services, vm_uuid: str) -> int:
    """Append, chain-valid, a second ``Stopped`` to a stopped VM: an event the fold refuses."""
    stream = list(services.app.recorder.select_events(UUID(vm_uuid)))
    head = stream[-1]
    stopped = next(s for s in stream if s.topic == Vm.Stopped.TOPIC)
    fields = stored_fields(services.app.mapper, stopped)
    previous = stored_fields(services.app.mapper, head)["chain"]
    version = head.originator_version + 1
    fields["chain"] = chain.link(previous, UUID(vm_uuid), version, stopped.topic, fields)
    services.app.recorder.insert_events([StoredEvent(
        originator_id=UUID(vm_uuid), originator_version=version, topic=stopped.topic,
        state=services.app.mapper.transcoder.encode(fields))])
    return version


def test_a_tail_the_read_models_have_not_reached_is_folded_too(services):
    """A chain-valid event that cannot be folded, past the read models' position, is a
    finding (it passed as "held": the fold stopped where the stuck read models were)."""
    vm_uuid = _vm_with_history(services)
    version = _append_unfoldable_event(services, vm_uuid)
    assert verify_chains(services.app) == []
    notes: list[str] = []
    found = verify_read_models(services, notes=notes)
    assert found, "the unfoldable tail passed"
    assert {(d.where, d.version, d.kind) for d in found} == {
        (f"stream {vm_uuid}", version, "fold")}
    assert any("behind the head" in note for note in notes)


def test_one_real_difference_names_only_its_vm(services):
    """Rows are keyed by the table's primary key on both sides (the key width was chosen per
    side from the data, and one difference named every VM)."""
    vm_uuid = _vm_with_history(services)
    untouched = services.commands.create_vm(
        VmSpec(owner_uuid=OWNER, brand="bhyve", ram=256), cause=make_cause()).vm_uuid
    for _ in range(2):  # provisioned: one transition row, to running
        services.projections.catch_up()
        services.worker.run_pending()
    services.projections.catch_up()
    with services.db.transaction() as tx:
        tx.execute("SELECT COUNT(*) AS n FROM vm_transitions WHERE vm_uuid = ?", (untouched,))
        assert tx.fetchone()["n"] == 1
        # the VM keeps one transition row: the live side's first column becomes unique while
        # the fresh fold's is not
        tx.execute("DELETE FROM vm_transitions WHERE vm_uuid = ? AND version > "
                   "(SELECT MIN(version) FROM vm_transitions WHERE vm_uuid = ?)",
                   (vm_uuid, vm_uuid))
    found = verify_read_models(services)
    assert found
    assert untouched not in str([str(d) for d in found])
    for difference in found:
        assert difference.where.startswith(f"vm_transitions row {vm_uuid}/")


def test_one_stream_that_cannot_be_folded_is_the_one_finding(services):
    vm_uuid = _vm_with_history(services)
    others = [_vm_with_history(services) for _ in range(2)]
    delete_event(services, vm_uuid, 3)
    found = verify_read_models(services)
    assert found
    for other in others:
        assert other not in str([str(d) for d in found])
    folds = [d for d in found if d.kind == "fold"]
    assert folds and {d.where for d in folds} == {f"stream {vm_uuid}"}


def test_an_unknown_topic_or_a_future_class_version_is_a_finding(services):
    vm_uuid = _vm_with_history(services)
    version = _version_of(services, vm_uuid, Vm.MetadataUpdated)
    set_event_column(services, vm_uuid, version, "topic", "vm.no_such_event")
    table, stream = events_table(services, vm_uuid)
    with services.db.transaction() as tx:
        tx.execute(f"SELECT state FROM {table} WHERE originator_id = ? "
                   "AND originator_version = 1", (stream,))
        state = json.loads(bytes(tx.fetchone()["state"]))
        state["class_version"] = 99
        tx.execute(f"UPDATE {table} SET state = ? WHERE originator_id = ? "
                   "AND originator_version = 1", (json.dumps(state).encode(), stream))
    found = {(d.version, d.kind) for d in verify_chains(services.app)}
    assert (version, "unknown topic") in found
    assert (1, "class version") in found


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_audit_verify_command_names_an_edited_snapshot_and_a_stuck_tail(
        services, settings):
    vm_uuid = _vm_with_history(services)
    version = _version_of(services, vm_uuid, Vm.MetadataUpdated)
    services.app.take_snapshot(UUID(vm_uuid), version=version)
    edit_snapshot(services, vm_uuid, b'"ram":256', b'"ram":99999')
    tail = _append_unfoldable_event(services, vm_uuid)
    failed = vmledger("audit", "verify", database_url=settings.database_url)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"snapshot: snapshot {vm_uuid} version {version}: " in failed.stdout
    assert f"fold: stream {vm_uuid} version {tail}: " in failed.stdout
    assert "note: vm_view is at log position" in failed.stdout


# An event that cannot be decoded, and one moved in the log (tester B, session 16): the one
# edited event is the finding, never the intact event after it nor a version that never
# existed (service/audit/verify.py, check_link)

def _findings(services) -> list[tuple[str, int | None, str]]:
    return [(d.where, d.version, d.kind) for d in verify_chains(services.app)]


def test_an_undecodable_event_is_the_finding_not_the_intact_one_after_it(services):
    vm_uuid = _vm_with_history(services)
    set_event_column(services, vm_uuid, 3, "state", b"{not json")
    assert _findings(services) == [(f"stream {vm_uuid}", 3, "undecodable")]


def test_an_event_moved_in_the_log_is_out_of_order_not_missing(services):
    vm_uuid = _vm_with_history(services)
    table, stream = events_table(services, vm_uuid)
    position = "rowid" if services.db.dialect is Dialect.SQLITE else "notification_id"
    with services.db.transaction() as tx:
        tx.execute(f"SELECT MAX({position}) AS head FROM {table}")
        head = tx.fetchone()["head"]
        tx.execute(f"UPDATE {table} SET {position} = ? WHERE originator_id = ? "
                   "AND originator_version = 3", (head + 1000, stream))
    [moved] = verify_chains(services.app)
    assert (moved.where, moved.version, moved.kind) == (f"stream {vm_uuid}", 3, "out of order")
    assert moved.detail.startswith(f"at position {head + 1000}, after version ")


def test_an_event_copied_from_another_stream_is_worded_not_raw_sql(services):
    """A job's queuing copied into another VM's stream makes the fresh fold of ``job_view``
    write its job twice: the finding says so, not SQLite's "UNIQUE constraint failed: …"."""
    source = _vm_with_history(services)
    target = _vm_with_history(services)
    queued = next(s for s in services.app.recorder.select_events(UUID(source))
                  if s.topic == Vm.JobQueued.TOPIC)
    version = services.commands.load(target).version + 1
    services.app.recorder.insert_events([StoredEvent(
        originator_id=UUID(target), originator_version=version, topic=queued.topic,
        state=queued.state)])
    folds = [d for d in verify_read_models(services) if d.kind == "fold"]
    assert [(d.where, d.version) for d in folds] == [(f"stream {target}", version)]
    assert "UNIQUE" not in folds[0].detail
    assert "a second job_view row of the same uuid" in folds[0].detail


def test_two_versions_swapped_are_the_two_findings(services):
    """Swapping versions 13 and 18 was "out of order" for 14-17, "tampered" for an intact 19,
    and never named 13 or 18 (auditor tester): each row's chain says which version it is."""
    vm_uuid = _vm_with_history(services)
    last = services.commands.load(vm_uuid).version
    first, second = 3, last - 1
    assert second - first > 2, "the history is too short"
    swap_versions(services, vm_uuid, first, second)
    found = _findings(services)
    assert found == [(f"stream {vm_uuid}", second, "tampered"),
                     (f"stream {vm_uuid}", first, "tampered")], found
    details = [d.detail for d in verify_chains(services.app)]
    assert f"the event of version {first}" in details[0]
    assert f"the event of version {second}" in details[1]


def test_an_event_moved_in_from_another_stream_is_named_not_its_new_streams_events(services):
    """An event of one VM moved into another's stream as its next version was "out of order"
    for every intact event of the second VM and never named itself (auditor tester)."""
    source = _vm_with_history(services)
    target = _vm_with_history(services)
    forged = services.commands.load(target).version + 1
    move_event(services, source, 3, target, forged)
    found = _findings(services)
    assert sorted(found) == sorted([(f"stream {source}", 3, "missing"),
                                    (f"stream {target}", forged, "tampered")]), found
    [moved] = [d for d in verify_chains(services.app) if d.where == f"stream {target}"]
    assert "moved from another stream, or forged" in moved.detail
