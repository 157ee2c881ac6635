"""The snapshot audit's fold applies stored events as every fold of stored events does
(``domain.folding.apply_stored``): an event edited into another aggregate's event class is
damage to its stream, reported as the fold's for the snapshot it keeps from being reached,
not applied by the library as if it were the VM's (which then read as a snapshot differing
from the fold). Found by a reviewer: ``_Fold`` called the event's own ``mutate``."""

from __future__ import annotations

from uuid import UUID

from domain.vm import Vm
from service.audit.snapshots import verify_snapshots
from tests.integration.test_audit import _version_of, _vm_with_history
from tests.tampering import edit_event_bytes, set_event_column

STATUS_CHANGED = "server.status_changed"  # domain.server.Server.StatusChanged


def test_an_event_edited_into_another_aggregates_class_is_the_folds_damage(services):
    vm_uuid = _vm_with_history(services)
    head = services.commands.load(vm_uuid).version
    services.app.take_snapshot(UUID(vm_uuid), version=head)
    assert verify_snapshots(services.app) == []
    # the VM's Stopped made a server's StatusChanged, with the field its apply reads: the
    # library's mutate applies it to the VM without a word
    version = _version_of(services, vm_uuid, Vm.Stopped)
    set_event_column(services, vm_uuid, version, "topic", STATUS_CHANGED)
    edit_event_bytes(services, vm_uuid, version, b'"chain":', b'"status":"running","chain":')
    found = verify_snapshots(services.app)
    assert [(d.where, d.version, d.kind) for d in found] == [
        (f"snapshot {vm_uuid}", head, "snapshot")]
    assert found[0].detail.startswith(
        f"its stream cannot be folded to this version: UnfoldableEventError: stream {vm_uuid} "
        f"has an event its fold cannot apply at version {version} "), found[0].detail
    assert "a StatusChanged is no event of a Vm" in found[0].detail, found[0].detail

