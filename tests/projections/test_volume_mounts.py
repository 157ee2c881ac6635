"""``volume_mounts``: events in, rows out (volumes, and each VM mount's address at boot and
now); which VMs are stale; a rebuild gives the same rows as the live projection."""

from __future__ import annotations

import json
import uuid

import pytest

from domain.states import Action
from domain.volume import Volume
from projections.vm_queries import Page, VmFilter
from projections.volume_mounts import VolumeMounts, is_stale
from service.audit.read_models import verify_read_models
from tests.builders import act, cause, create, new_vm, rows, run_head_job, settle

SERVER = "0d3f4b6e-0000-4000-8000-0000000000aa"
NET_A = "5f3c7d2e-1111-4222-8333-444455556666"
NET_B = "6a4d8e3f-2222-4333-8444-555566667777"
MOUNTS = "vm_uuid, mountpoint"


def apply(services, events, first_position: int = 1) -> None:
    """Feed domain events straight into a VolumeMounts, as the runner would, in one
    transaction."""
    with services.db.transaction() as tx:
        VolumeMounts().apply(tx, list(enumerate(events, first_position)))


def new_volume(**networks: str) -> Volume:
    """A volume named ``data`` on ``networks`` (events still pending)."""
    return Volume.create(volume_uuid=uuid.uuid4(), name="data", cause=cause(),
                         networks=networks or None)


def mounting(*volumes: Volume) -> list[dict[str, str]]:
    """Mounts of ``volumes`` at /v0, /v1, ..."""
    return [{"volume_uuid": str(v.id), "mountpoint": f"/v{n}"} for n, v in enumerate(volumes)]


def test_a_volume_becomes_one_row_with_its_networks_in_attach_order_and_their_address(services):
    volume = new_volume(**{NET_B: "10.0.0.5"})
    volume.attach_network(NET_A, "192.168.7.20", cause=cause())
    apply(services, volume.collect_events())
    [row] = rows(services, "volume_mounts_volumes")
    assert (row["uuid"], row["name"], row["version"]) == (str(volume.id), "data", 3)
    assert list(json.loads(row["networks"]).items()) == [
        (NET_B, "10.0.0.5"), (NET_A, "192.168.7.20")]
    assert row["address"] == volume.address == "10.0.0.5,192.168.7.20"


def test_a_vm_mounting_volumes_gets_a_row_per_mount_that_has_not_booted_yet(services):
    first, second = new_volume(**{NET_A: "10.0.0.5"}), new_volume()
    vm = new_vm(volumes=mounting(first, second))
    apply(services, [*first.collect_events(), *second.collect_events(), *vm.collect_events()])
    assert [(r["volume_uuid"], r["mountpoint"], r["address_at_boot"], r["address"])
            for r in rows(services, "volume_mounts", order_by=MOUNTS)] == [
        (str(first.id), "/v0", None, "10.0.0.5"), (str(second.id), "/v1", None, None)]


def test_a_boot_takes_the_volumes_current_address_as_the_address_at_boot(services):
    volume = new_volume(**{NET_A: "10.0.0.5"})
    vm = new_vm(volumes=mounting(volume))
    run_head_job(vm, lambda v: v.record_provisioned(SERVER, cause=cause()))
    apply(services, [*volume.collect_events(), *vm.collect_events()])
    [row] = rows(services, "volume_mounts", order_by=MOUNTS)
    assert row["address_at_boot"] == row["address"] == "10.0.0.5"


class Statements:
    """A transaction that records each statement it is given."""

    def __init__(self, tx):
        self.tx, self.sent = tx, []

    def execute(self, statement, params=()):
        self.sent.append(statement)
        self.tx.execute(statement, params)

    def __getattr__(self, name):
        return getattr(self.tx, name)


def test_a_boot_in_a_later_batch_finds_the_mounts_and_an_unmounted_vms_boot_costs_nothing(
    services,
):
    volume = new_volume(**{NET_A: "10.0.0.5"})
    mounted, bare = new_vm(volumes=mounting(volume)), new_vm()
    apply(services, [*volume.collect_events(), *mounted.collect_events(),
                     *bare.collect_events()])
    for vm in (mounted, bare):
        run_head_job(vm, lambda v: v.record_provisioned(SERVER, cause=cause()))
    with services.db.transaction() as tx:
        spy = Statements(tx)
        VolumeMounts().apply(spy, list(enumerate(bare.collect_events(), 10)))
        assert not [s for s in spy.sent if s.startswith("UPDATE")]
        VolumeMounts().apply(spy, list(enumerate(mounted.collect_events(), 20)))
    [row] = rows(services, "volume_mounts", order_by=MOUNTS)
    assert row["address_at_boot"] == row["address"] == "10.0.0.5"


def test_a_network_change_moves_every_mounts_address_but_not_its_address_at_boot(services):
    volume = new_volume(**{NET_A: "10.0.0.5"})
    vms = [new_vm(volumes=mounting(volume)) for _ in range(2)]
    for vm in vms:
        run_head_job(vm, lambda v: v.record_provisioned(SERVER, cause=cause()))
    apply(services, [*volume.collect_events(), *(e for vm in vms for e in vm.collect_events())])
    volume.detach_network(NET_A, cause=cause())
    volume.attach_network(NET_B, "10.9.0.1", cause=cause())
    apply(services, volume.collect_events(), first_position=100)
    mounts = rows(services, "volume_mounts", order_by=MOUNTS)
    assert [(r["address_at_boot"], r["address"]) for r in mounts] == [("10.0.0.5", "10.9.0.1")] * 2
    assert all(is_stale("running", r) for r in mounts)
    assert not any(is_stale("stopped", r) for r in mounts)


def test_a_refresh_recorded_after_the_boot_is_the_address_at_boot(services):
    """The job read the volume before a change it then saved behind: the VM booted with what
    the job read, so the refresh (saved after the boot) wins and the mount is stale."""
    volume = new_volume(**{NET_A: "10.0.0.5"})
    vm = new_vm(volumes=mounting(volume))
    apply(services, [*volume.collect_events(), *vm.collect_events()])
    volume.attach_network(NET_B, "10.9.0.1", cause=cause())
    apply(services, volume.collect_events(), first_position=10)

    def booted(v):
        v.record_provisioned(SERVER, cause=cause())
        v.record_volume_addresses({str(volume.id): "10.0.0.5"}, cause=cause())

    run_head_job(vm, booted)
    apply(services, vm.collect_events(), first_position=20)
    [row] = rows(services, "volume_mounts", order_by=MOUNTS)
    assert (row["address_at_boot"], row["address"]) == ("10.0.0.5", "10.0.0.5,10.9.0.1")


def test_an_event_of_a_volume_the_model_never_saw_created_is_caught(services):
    volume = new_volume()
    volume.collect_events()
    volume.attach_network(NET_A, "10.0.0.5", cause=cause())
    with pytest.raises(LookupError, match="missed"):
        apply(services, volume.collect_events(), first_position=2)


def test_only_running_vms_whose_mounted_address_changed_are_listed_stale(services):
    volume, _ = services.commands.create_volume(name="data", cause=cause(),
                                                networks={NET_A: "10.0.0.5"})
    mount = [{"volume_uuid": str(volume.id), "mountpoint": "/data"}]
    running, stopped = (create(services, volumes=mount).vm_uuid for _ in range(2))
    unmounted = create(services).vm_uuid
    settle(services)
    act(services, stopped, Action.STOP)
    settle(services)
    services.commands.attach_network(str(volume.id), NET_B, "10.9.0.1", cause=cause())
    services.projections.catch_up()

    stale_vms, _ = services.vms.list(VmFilter(stale_mounts=True), Page())
    assert [vm["uuid"] for vm in stale_vms] == [running]
    assert services.vms.count(VmFilter(stale_mounts=True)) == 1
    assert services.vms.get(running)["volumes"][0]["stale"] is True
    assert services.vms.get(stopped)["volumes"][0] == {
        "volume_uuid": str(volume.id), "mountpoint": "/data", "address": "10.0.0.5,10.9.0.1",
        "stale": False}
    assert services.vms.get(unmounted)["volumes"] == []


def test_a_rebuilt_volume_mounts_equals_the_live_one_row_for_row(services):
    volumes = [services.commands.create_volume(name=f"vol-{n}", cause=cause(),
                                               networks={NET_A: f"10.0.0.{n + 1}"})[0]
               for n in range(2)]
    vms = [create(services, volumes=[{"volume_uuid": str(v.id), "mountpoint": "/data"}]).vm_uuid
           for v in (*volumes, volumes[0])]
    settle(services)
    services.commands.attach_network(str(volumes[0].id), NET_B, "10.9.0.1", cause=cause())
    services.commands.detach_network(str(volumes[1].id), NET_A, cause=cause())
    act(services, vms[0], Action.REBOOT)
    act(services, vms[1], Action.STOP)
    settle(services)
    live = {table: rows(services, table, order_by=order) for table, order in
            (("volume_mounts_volumes", "uuid"), ("volume_mounts", MOUNTS))}
    assert len(live["volume_mounts"]) == 3
    assert sum(is_stale("running", r) for r in live["volume_mounts"]) == 2

    services.projections.rebuild(["volume_mounts"])

    assert {table: rows(services, table, order_by=order) for table, order in
            (("volume_mounts_volumes", "uuid"), ("volume_mounts", MOUNTS))} == live
    assert verify_read_models(services) == []
