"""The world changing under the control plane, through the simulator: host reboots, guest
shutdowns and crashes, agents that restart and forget (design.md, "Persistence policy").

Each scenario: a running VM, a happening in the simulated world, the simulated agent's
inventory report, then every job the report queued runs.
"""

from __future__ import annotations

import pytest

from domain.errors import StaleGenerationError
from domain.states import Action
from domain.vm import Vm, make_cause
from service.commands.application import VmSpec
from service.commands.versioning import NEWEST
from tests.builders import settle

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"
AGENT = make_cause("agent")


def running_vm(services, persistence="persistent") -> str:
    accepted = services.commands.create_vm(
        VmSpec(owner_uuid=OWNER, brand="bhyve", ram=512, persistence=persistence),
        cause=make_cause())
    settle(services)
    assert services.commands.load(accepted.vm_uuid).state == "running"
    return accepted.vm_uuid


def report(services, server_uuid: str) -> dict[str, str]:
    """The simulated agent of ``server_uuid`` sends its inventory."""
    sent = services.fleet.report(server_uuid)
    return services.agents.report_inventory(
        server_uuid, boot_id=sent["boot_id"], generation=sent["generation"],
        vms={vm: seen["state"] for vm, seen in sent["vms"].items()}, cause=AGENT).changed


def event_types(services, vm_uuid: str) -> list[str]:
    stream = services.app.recorder.select_events(services.commands.load(vm_uuid).id)
    return [type(services.app.mapper.to_domain_event(s)).__name__ for s in stream]


@pytest.mark.parametrize(("persistence", "final", "restarted"), [
    ("persistent", "running", True), ("ephemeral", "destroyed", False)])
def test_a_host_reboot_restarts_a_persistent_vm_and_destroys_an_ephemeral_one(
        services, persistence, final, restarted):
    vm_uuid = running_vm(services, persistence)
    server = services.commands.load(vm_uuid).server_uuid
    services.fleet.reboot_server(server)
    assert report(services, server) == {vm_uuid: "host_reboot"}
    settle(services)
    vm = services.commands.load(vm_uuid)
    assert vm.state == final
    assert services.fleet.running_copies(vm_uuid) == (1 if restarted else 0)
    assert "Failed" in event_types(services, vm_uuid)


@pytest.mark.parametrize(("persistence", "final"), [
    ("persistent", "stopped"), ("ephemeral", "destroyed")])
def test_a_guest_shutdown_leaves_a_persistent_vm_stopped_and_destroys_an_ephemeral_one(
        services, persistence, final):
    vm_uuid = running_vm(services, persistence)
    server = services.commands.load(vm_uuid).server_uuid
    services.fleet.shut_down_guest(vm_uuid)
    assert report(services, server) == {vm_uuid: "guest_shutdown"}
    settle(services)
    assert services.commands.load(vm_uuid).state == final
    assert services.fleet.running_copies(vm_uuid) == 0


@pytest.mark.parametrize(("persistence", "final", "copies"), [
    ("persistent", "running", 1), ("ephemeral", "destroyed", 0)])
def test_a_guest_crash_restarts_a_persistent_vm_and_destroys_an_ephemeral_one(
        services, persistence, final, copies):
    vm_uuid = running_vm(services, persistence)
    server = services.commands.load(vm_uuid).server_uuid
    services.fleet.crash_guest(vm_uuid)
    assert report(services, server) == {vm_uuid: "guest_crash"}
    settle(services)
    vm = services.commands.load(vm_uuid)
    assert vm.state == final
    assert services.fleet.running_copies(vm_uuid) == copies
    if copies:
        assert vm.server_uuid == server  # restarted where it crashed
        assert vm.error is None


@pytest.mark.parametrize("persistence", ["persistent", "ephemeral"])
def test_an_agent_that_forgot_its_vm_gets_it_quarantined_never_a_second_copy(
        services, persistence):
    vm_uuid = running_vm(services, persistence)
    server = services.commands.load(vm_uuid).server_uuid
    services.fleet.restart_agent(server)  # same boot id; the VM still runs, unreported
    assert report(services, server) == {vm_uuid: "agent_forgot"}
    settle(services)
    vm = services.commands.load(vm_uuid)
    assert vm.state == "quarantined"
    assert vm.quarantine["previous_owner_uuid"] == OWNER
    assert services.fleet.running_copies(vm_uuid) == 1
    # and nothing starts another copy, even when asked to by a later report
    assert report(services, server) == {}
    settle(services)
    assert services.fleet.running_copies(vm_uuid) == 1


@pytest.mark.parametrize("persistence", ["persistent", "ephemeral"])
def test_the_control_case_a_new_boot_id_is_a_host_reboot_not_a_forgetful_agent(
        services, persistence):
    vm_uuid = running_vm(services, persistence)
    server = services.commands.load(vm_uuid).server_uuid
    services.fleet.reboot_server(server)
    assert report(services, server) == {vm_uuid: "host_reboot"}
    settle(services)
    assert services.commands.load(vm_uuid).state != "quarantined"
    assert services.fleet.running_copies(vm_uuid) <= 1


def test_a_policy_set_one_happening_at_a_time_overrides_its_preset(services):
    vm_uuid = running_vm(services, {"preset": "persistent", "guest_crash": "destroy"})
    server = services.commands.load(vm_uuid).server_uuid
    services.fleet.crash_guest(vm_uuid)
    report(services, server)
    settle(services)
    assert services.commands.load(vm_uuid).state == "destroyed"


def test_a_stale_or_replayed_report_changes_nothing(services):
    vm_uuid = running_vm(services)
    server = services.commands.load(vm_uuid).server_uuid
    services.fleet.shut_down_guest(vm_uuid)
    sent = services.fleet.report(server)
    vms = {vm: seen["state"] for vm, seen in sent["vms"].items()}
    services.agents.report_inventory(server, boot_id=sent["boot_id"],
                                     generation=sent["generation"], vms=vms, cause=AGENT)
    head = services.commands.head_position()
    for generation in (sent["generation"], sent["generation"] - 1):
        with pytest.raises(StaleGenerationError):
            services.agents.report_inventory(server, boot_id=sent["boot_id"],
                                             generation=generation, vms={}, cause=AGENT)
    assert services.commands.head_position() == head


def test_a_report_that_changes_nothing_appends_nothing(services):
    vm_uuid = running_vm(services)
    server = services.commands.load(vm_uuid).server_uuid
    head = services.commands.head_position()
    assert report(services, server) == {}
    assert services.commands.head_position() == head


def test_a_late_report_does_not_revive_a_destroyed_vm(services):
    vm_uuid = running_vm(services)
    server = services.commands.load(vm_uuid).server_uuid
    late = services.fleet.report(server)  # taken while the VM still ran
    services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=NEWEST,
                                     cause=make_cause())
    settle(services)
    head = services.commands.head_position()
    services.agents.report_inventory(
        server, boot_id=late["boot_id"], generation=late["generation"],
        vms={vm: seen["state"] for vm, seen in late["vms"].items()}, cause=AGENT)
    assert services.commands.load(vm_uuid).state == "destroyed"
    assert services.commands.head_position() == head


def test_each_servers_allocated_capacity_is_the_sum_the_vm_streams_say_is_placed_there(
        services):
    vms = [running_vm(services, "ephemeral" if n % 2 else "persistent") for n in range(6)]
    services.commands.request_action(vms[0], Action.DESTROY, behaviour=NEWEST,
                                     cause=make_cause())
    services.fleet.crash_guest(vms[1])
    services.fleet.crash_guest(vms[2])
    for server in {services.commands.load(v).server_uuid for v in vms}:
        report(services, server)
    services.commands.create_vm(VmSpec(owner_uuid=OWNER, brand="bhyve", ram=10**6),
                                cause=make_cause())  # fits nowhere: its provision fails
    settle(services)
    # recompute, from the VMs' events alone, what each server should hold
    placed: dict[str, int] = {}
    for notification in services.app.recorder.select_notifications(0, 100_000):
        event = services.app.mapper.to_domain_event(notification)
        if isinstance(event, Vm.CapacityClaimed):
            placed[event.server_uuid] = placed.get(event.server_uuid, 0) + event.ram_mib
        elif isinstance(event, Vm.CapacityReleased):
            vm = services.commands.load(event.originator_id, version=event.originator_version - 1)
            placed[event.server_uuid] -= vm.claim["ram_mib"]
    for server in services.servers.list():
        aggregate = services.commands.load_server(server["uuid"])
        assert aggregate.ram_allocated_mib == placed.get(server["uuid"], 0)
        assert server["ram_allocated_mib"] == aggregate.ram_allocated_mib


@pytest.mark.parametrize("persistence", ["persistent", "ephemeral"])
def test_a_host_reboot_while_quarantined_is_read_as_that_reboot_once_released(
        services, persistence):
    vm_uuid = running_vm(services, persistence)
    server = services.commands.load(vm_uuid).server_uuid
    services.quarantine.quarantine(vm_uuid, "inspect", cause=make_cause())
    services.fleet.reboot_server(server)  # the copy is gone; the VM stays quarantined
    assert report(services, server) == {vm_uuid: "host_reboot"}
    assert services.commands.load(vm_uuid).state == "quarantined"
    services.quarantine.release(vm_uuid, cause=make_cause())
    assert services.commands.load(vm_uuid).state == "running"  # as the log had it
    assert report(services, server) == {vm_uuid: "host_reboot"}  # same boot id, yet no forgetting
    settle(services)
    vm = services.commands.load(vm_uuid)
    assert vm.state == ("running" if persistence == "persistent" else "destroyed")
    assert vm.quarantine is None
    assert services.fleet.running_copies(vm_uuid) == (1 if persistence == "persistent" else 0)
    assert report(services, server) == {}  # and the next report finds nothing to do


def test_a_stopped_vm_a_host_reboot_took_is_not_quarantined_by_the_next_report(services):
    vm_uuid = running_vm(services)
    server = services.commands.load(vm_uuid).server_uuid
    services.commands.request_action(vm_uuid, Action.STOP, behaviour=NEWEST, cause=make_cause())
    settle(services)
    services.fleet.reboot_server(server)
    assert report(services, server) == {vm_uuid: "host_reboot"}
    assert report(services, server) == {}  # same boot id: still that reboot's doing
    assert services.commands.load(vm_uuid).state == "stopped"
    # once it boots again, an agent that forgets it is an agent that forgot
    services.commands.request_action(vm_uuid, Action.START, behaviour=NEWEST,
                                     cause=make_cause())
    settle(services)
    vm = services.commands.load(vm_uuid)
    assert vm.state == "running"
    services.fleet.restart_agent(vm.server_uuid)
    assert report(services, vm.server_uuid) == {vm_uuid: "agent_forgot"}
    assert services.commands.load(vm_uuid).state == "quarantined"


def test_a_copy_started_by_hand_after_a_host_reboot_is_not_read_as_that_reboot_again(services):
    """The reboot took the quarantined VM's copy (CopyLost); the operator starts it by hand on
    the host and the reports list it again (CopyFound), so once released as running an agent
    that forgets it has forgotten a copy that may still run: quarantined, never started on
    another server beside it."""
    vm_uuid = running_vm(services)
    server = services.commands.load(vm_uuid).server_uuid
    services.quarantine.quarantine(vm_uuid, "inspect", cause=make_cause())
    services.fleet.reboot_server(server)
    assert report(services, server) == {vm_uuid: "host_reboot"}
    services.fleet.ensure_registered(server, vm_uuid, ram_mib=512, metadata={})
    services.fleet.ensure_state(server, vm_uuid, "running")  # the operator, by hand
    report(services, server)
    assert event_types(services, vm_uuid)[-1] == "CopyFound"
    assert services.commands.load(vm_uuid).lost_copy is None
    services.quarantine.release(vm_uuid, cause=make_cause())
    assert services.commands.load(vm_uuid).state == "running"
    services.fleet.restart_agent(server)
    assert report(services, server) == {vm_uuid: "agent_forgot"}
    settle(services)
    assert services.commands.load(vm_uuid).state == "quarantined"
    assert services.fleet.running_copies(vm_uuid) == 1
