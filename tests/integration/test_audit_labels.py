"""What ``audit verify`` calls an edited row (auditor tester): an event whose content was
edited, or another stream's event put in its place, is ``tampered`` wherever it sits in the
log (and ``out of order`` too when its position is wrong), never a ``missing`` version while
the row is there; and the intact event after an edited one is not named with it
(service/audit/chains.py)."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import StoredEvent

from domain.vm import Vm
from projections.db import Dialect
from service.audit.verify import stored_fields, verify_chains
from tests.integration.test_audit import _vm_with_history
from tests.tampering import (
    delete_event,
    edit_event_bytes,
    events_table,
    move_event,
    set_event_column,
)

EDITED = 16  # a JobSucceeded, with later events after it


def _findings(services) -> list[tuple[str, int | None, str, str]]:
    return [(d.where, d.version, d.kind, d.detail) for d in verify_chains(services.app)]


def _kinds(found) -> list[tuple[str, int | None, str]]:
    return sorted((where, version, kind) for where, version, kind, _ in found)


def _move_to_end(services, vm_uuid: str, version: int) -> int:
    """Give the stream's event at ``version`` a position past the log's head; returns it."""
    table, stream = events_table(services, vm_uuid)
    position = "rowid" if services.db.dialect is Dialect.SQLITE else "notification_id"
    with services.db.transaction() as tx:
        tx.execute(f"SELECT MAX({position}) AS head FROM {table}")
        moved = tx.fetchone()["head"] + 100_000
        tx.execute(f"UPDATE {table} SET {position} = ? WHERE originator_id = ? "
                   "AND originator_version = ?", (moved, stream, version))
    return moved


def _stored(services, vm_uuid: str, version: int) -> StoredEvent:
    return next(s for s in services.app.recorder.select_events(UUID(vm_uuid))
                if s.originator_version == version)


def _stopped(services, vm_uuid: str) -> StoredEvent:
    return next(s for s in services.app.recorder.select_events(UUID(vm_uuid))
                if s.topic == Vm.Stopped.TOPIC)


def test_an_edited_event_moved_later_is_tampered_and_out_of_order_not_missing(services):
    vm_uuid = _vm_with_history(services)
    edit_event_bytes(services, vm_uuid, EDITED, b'"actor":"worker:', b'"actor":"evil:')
    moved = _move_to_end(services, vm_uuid, EDITED)
    found = _findings(services)
    assert _kinds(found) == [(f"stream {vm_uuid}", EDITED, "out of order"),
                             (f"stream {vm_uuid}", EDITED, "tampered")], found
    [tampered] = [d for _, _, k, d in found if k == "tampered"]
    assert "the event's content was changed" in tampered
    [out_of_order] = [d for _, _, k, d in found if k == "out of order"]
    assert out_of_order.startswith(f"at position {moved}, after version ")


def test_another_streams_event_put_late_in_place_of_a_deleted_one_is_named(services):
    vm_uuid = _vm_with_history(services)
    other = _vm_with_history(services)
    delete_event(services, vm_uuid, EDITED)
    stopped = _stopped(services, other)
    services.app.recorder.insert_events([StoredEvent(
        originator_id=UUID(vm_uuid), originator_version=EDITED, topic=stopped.topic,
        state=stopped.state)])
    found = _findings(services)
    assert _kinds(found) == [(f"stream {vm_uuid}", EDITED, "out of order"),
                             (f"stream {vm_uuid}", EDITED, "tampered")], found
    [tampered] = [d for _, _, k, d in found if k == "tampered"]
    assert (f"it does not link to this stream's version {EDITED - 1} (an event moved from "
            "another stream, or forged)") in tampered


def test_another_streams_event_moved_earlier_in_place_of_a_deleted_one_is_named(services):
    """The moved row sits before the versions it follows: it was kept aside and skipped at the
    stream's end as if another event held its version, leaving a false ``missing``."""
    other = _vm_with_history(services)  # its events come before the VM's in the log
    vm_uuid = _vm_with_history(services)
    delete_event(services, vm_uuid, EDITED)
    move_event(services, other, 15, vm_uuid, EDITED)
    found = [f for f in _findings(services) if f[0] == f"stream {vm_uuid}"]
    assert _kinds(found) == [(f"stream {vm_uuid}", EDITED, "out of order"),
                             (f"stream {vm_uuid}", EDITED, "tampered")], found
    [tampered] = [d for _, _, k, d in found if k == "tampered"]
    assert (f"it does not link to this stream's version {EDITED - 1} (an event moved from "
            "another stream, or forged)") in tampered
    [out_of_order] = [d for _, _, k, d in found if k == "out of order"]
    assert f"before version {EDITED - 1} in the log" in out_of_order


def test_an_edited_chain_value_names_its_row_not_the_intact_one_after_it(services):
    vm_uuid = _vm_with_history(services)
    value = stored_fields(services.app.mapper, _stored(services, vm_uuid, EDITED))["chain"]
    edited = value[:-1] + ("0" if value[-1] != "0" else "1")
    edit_event_bytes(services, vm_uuid, EDITED, value.encode(), edited.encode())
    found = _findings(services)
    assert _kinds(found) == [(f"stream {vm_uuid}", EDITED, "tampered")], found
    assert "its chain value was changed" in found[0][3]


def test_an_edited_content_names_its_row_not_the_intact_one_after_it(services):
    vm_uuid = _vm_with_history(services)
    edit_event_bytes(services, vm_uuid, EDITED, b'"actor":"worker:', b'"actor":"evil:')
    found = _findings(services)
    assert _kinds(found) == [(f"stream {vm_uuid}", EDITED, "tampered")], found
    assert "the event's content was changed" in found[0][3]


def test_another_vms_event_pasted_into_a_row_is_named_as_such_alone(services):
    vm_uuid = _vm_with_history(services)
    other = _vm_with_history(services)
    stopped = _stopped(services, other)
    set_event_column(services, vm_uuid, EDITED, "topic", stopped.topic)
    set_event_column(services, vm_uuid, EDITED, "state", stopped.state)
    found = _findings(services)
    assert _kinds(found) == [(f"stream {vm_uuid}", EDITED, "tampered")], found
    assert (f"it does not link to this stream's version {EDITED - 1} (an event moved from "
            "another stream, or forged)") in found[0][3]
    assert f"version {EDITED + 1} cannot be checked against it" in found[0][3]


def test_a_pure_move_later_is_only_out_of_order(services):
    vm_uuid = _vm_with_history(services)
    _move_to_end(services, vm_uuid, EDITED)
    assert _kinds(_findings(services)) == [(f"stream {vm_uuid}", EDITED, "out of order")]


def test_two_edited_rows_in_a_row_name_the_first_and_the_one_it_leaves_unchecked(services):
    """The second row's link cannot be checked once the first's content and chain are both
    lost: the first is named as a row that links nowhere, and the second as not checked."""
    vm_uuid = _vm_with_history(services)
    for version in (EDITED, EDITED + 1):
        edit_event_bytes(services, vm_uuid, version, b'"actor":"worker:', b'"actor":"evil:')
    found = _findings(services)
    assert _kinds(found) == [(f"stream {vm_uuid}", EDITED, "tampered")], found
    assert f"version {EDITED + 1} cannot be checked against it" in found[0][3]


def test_two_events_moved_later_in_reverse_order_are_the_two_findings(services):
    """Versions 17 then 16 moved past the head: the intact event after them was called
    tampered (it links to 17, which the checker had set aside as out of order)."""
    vm_uuid = _vm_with_history(services)
    _move_to_end(services, vm_uuid, EDITED + 1)
    _move_to_end(services, vm_uuid, EDITED)
    assert _kinds(_findings(services)) == [(f"stream {vm_uuid}", EDITED, "out of order"),
                                           (f"stream {vm_uuid}", EDITED + 1, "out of order")]


def test_an_undecodable_event_moved_later_is_named_not_missing(services):
    vm_uuid = _vm_with_history(services)
    set_event_column(services, vm_uuid, EDITED, "state", b"{not json")
    _move_to_end(services, vm_uuid, EDITED)
    assert _kinds(_findings(services)) == [(f"stream {vm_uuid}", EDITED, "out of order"),
                                           (f"stream {vm_uuid}", EDITED, "undecodable")]
