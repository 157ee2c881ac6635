"""Snapshots of long streams (service/commands/snapshots.py): taken every 100 versions after a save,
used by loads, equal to the fold of the events, and never a reason for a command to fail."""

from __future__ import annotations

from uuid import UUID

from domain.vm import Vm, make_cause
from service.container import Services
from service.commands.snapshots import SNAPSHOT_EVERY, snapshot_long_streams
from tests.builders import create


def folded(services: Services, vm_uuid: str, version: int | None = None) -> Vm:
    """The VM folded from its events alone (no snapshot, no cache)."""
    vm = None
    for event in services.app.events.get(UUID(vm_uuid), lte=version):
        vm = event.mutate(vm)
    return vm


def state(vm: Vm) -> dict:
    return {k: v for k, v in vars(vm).items() if k != "_pending_events"}


def test_a_save_crossing_a_multiple_of_100_versions_leaves_a_snapshot_loads_start_from(
    services, settings,
):
    vm_uuid = create(services).vm_uuid
    vm = services.commands.load(vm_uuid)
    for n in range(2 * SNAPSHOT_EVERY + 30):
        vm.update_metadata({"alias": f"alias-{n}"}, cause=make_cause())
        if len(vm.pending_events) == 45:
            services.commands.save(vm)
    services.commands.save(vm)
    snapshots = list(services.app.snapshots.get(vm.id))
    assert [s.originator_version for s in snapshots] == [SNAPSHOT_EVERY, 2 * SNAPSHOT_EVERY]

    cold = Services.build(settings.model_copy(update={"aggregate_cache_size": 0}))
    try:
        loaded = []
        read = cold.app.events.get

        def counting_get(*args, **kwargs):
            events = list(read(*args, **kwargs))
            loaded.append(len(events))
            return events

        cold.app.events.get = counting_get
        assert state(cold.commands.load(vm_uuid)) == state(folded(services, vm_uuid))
        assert loaded and max(loaded) < SNAPSHOT_EVERY  # the events after the snapshot only
        middle = SNAPSHOT_EVERY + 17
        assert state(cold.commands.load(vm_uuid, version=middle)) == state(
            folded(services, vm_uuid, middle))
    finally:
        cold.close()


def test_a_snapshot_already_taken_is_left_and_the_save_does_not_fail(services, caplog):
    vm_uuid = create(services).vm_uuid
    vm = services.commands.load(vm_uuid)
    for n in range(SNAPSHOT_EVERY):
        vm.update_metadata({"alias": f"alias-{n}"}, cause=make_cause())
    recordings = services.app.save(vm)
    assert snapshot_long_streams(services.app, recordings) == 1
    assert snapshot_long_streams(services.app, recordings) == 0  # as a rival process would
    assert "no snapshot of" in caplog.text
    assert len(list(services.app.snapshots.get(vm.id))) == 1
