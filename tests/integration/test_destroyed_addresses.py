"""A destroyed VM's NIC addresses go back to the network only once no copy of the VM on a
node can still be configured with them (docs/jobs.md, "A quarantine while a job runs";
docs/api.md, "Networks and NICs").

A version 2 DELETE that destroys at once (every server a copy may be on removed) used to
release them in the save of its ``Destroyed``, before its ``fence`` job had raised the fence on
those servers: another VM could be given an address while the canceled worker's late
``add_nics`` could still land on the node with it. Worker A is paused in its call while the
DELETE runs, by a hook (``test_fencing.paused_in``); B runs the fence job. No sleeps, both
backends.
"""

from __future__ import annotations

import pytest

from domain.errors import ValidationError, VmAlreadyDestroyedError
from domain.states import Action
from domain.vm import make_cause
from service.commands.networks import NicRequest
from tests.builders import act, create, job, settle
from tests.integration.test_canceled_jobs_fenced import fence_jobs, taken_by_a_fence, worker_b
from tests.integration.test_fencing import paused_in
from tests.integration.test_job_faults import copies
from tests.integration.test_reconfigure_faults import (
    change, claims, copy_macs, running_vm_with_a_network,
)


def test_an_immediate_destroy_gives_the_address_to_no_one_before_its_fence_job_ran(
        services, monkeypatch, json_logs):
    vm_uuid, server_uuid, network, add, nic = _running_with_a_nic_being_added(services)
    same_address = (NicRequest(network, ip=nic["ip"]),)
    taker: list[str] = []

    def meanwhile() -> None:
        _destroyed_at_once_on_a_removed_server(services, vm_uuid, server_uuid)
        # A's add_nics may still land on the node: the address is still the VM's
        assert claims(services, network) == {nic["ip"]: vm_uuid}
        with pytest.raises(ValidationError, match=nic["ip"]):
            create(services, networks=same_address)
        assert worker_b(services).run_vm(vm_uuid)  # the fence job
        # fenced on the node: the address goes back, and the next VM may be given it
        assert claims(services, network) == {}
        taker.append(create(services, networks=same_address).vm_uuid)

    assert paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile) == []

    assert taken_by_a_fence(json_logs, add)  # A's late add_nics refused on the node
    assert copy_macs(services, vm_uuid, server_uuid) == []
    assert claims(services, network) == {nic["ip"]: taker[0]}
    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "succeeded", fence
    assert job(services, add)["execution"] == "canceled"
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.nic_list) == ("destroyed", [nic])  # its nics show what it had


def test_an_immediate_destroy_whose_fence_job_cannot_reach_the_removed_node_frees_the_address(
        services, monkeypatch):
    # a server recorded removed is trusted to be gone, as a destroy at once with no job
    # running trusts it: its unreachable node holds nothing the fence job waits for
    vm_uuid, server_uuid, network, _add, nic = _running_with_a_nic_being_added(services)

    def meanwhile() -> None:
        _destroyed_at_once_on_a_removed_server(services, vm_uuid, server_uuid)
        assert claims(services, network) == {nic["ip"]: vm_uuid}
        # the node cannot be reached: each attempt to raise the fence there fails
        services.fleet.faults.inject("inventory", "fail", services.worker.step_attempts)
        assert worker_b(services).run_vm(vm_uuid)

    paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile)

    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "succeeded", fence
    [step] = fence["chain_results"]
    assert step["result"]["server_uuid"] == server_uuid
    assert "recorded removed" in step["result"]["removed"], step
    assert claims(services, network) == {}
    # no address is kept for a later fence and release
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.addresses_kept) == ("destroyed", False)


def test_a_v1_delete_of_a_vm_whose_fence_job_was_given_up_fences_again_and_frees_the_address(
        services, monkeypatch):
    # a fence job that failed or was given up kept the addresses, and nothing released them:
    # a v2 DELETE is VmAlreadyDestroyed, and a v1 DELETE's job only said already destroyed
    vm_uuid, server_uuid, network, _add, nic = _running_with_a_nic_being_added(services)

    def meanwhile() -> None:
        _destroyed_at_once_on_a_removed_server(services, vm_uuid, server_uuid)
        b = worker_b(services)
        b.max_attempts = 0  # as if its workers had been lost: given up at once
        assert b.run_vm(vm_uuid)

    paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile)
    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "failed" and "addresses are kept" in fence["error"], fence
    assert claims(services, network) == {nic["ip"]: vm_uuid}
    with pytest.raises(VmAlreadyDestroyedError):
        act(services, vm_uuid, Action.DESTROY)

    delete = act(services, vm_uuid, Action.DESTROY, version=1).job_uuid
    settle(services)

    done = job(services, delete)
    assert done["execution"] == "succeeded", done
    assert [step["name"] for step in done["chain_results"]] == ["fence"]
    assert claims(services, network) == {}
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.addresses_kept, vm.nic_list) == ("destroyed", False, [nic])


# -- a failed VM that kept its NICs: a copy may be left on a server -------------------------

def failed_keeping_a_copy(services) -> tuple[str, str, str, dict]:
    """A VM whose provision failed leaving a copy it could not remove: created (not booted)
    on the server it claimed, its boot failing every attempt, then the cleanup's
    ``unregister`` failing too. The VM is ``failed`` on no server and keeps its NIC (docs/api.md,
    "Networks and NICs"). Returns the VM, that server, the network and the NIC."""
    network, _ = services.commands.create_network(
        name="n", subnet="10.6.0.0/29", provision_start_ip="10.6.0.2",
        provision_end_ip="10.6.0.5", gateway=None, cause=make_cause())
    services.fleet.faults.inject("ensure_state", "fail", services.worker.step_attempts)
    services.fleet.faults.inject("unregister", "fail", 1)
    vm_uuid = create(services, networks=(NicRequest(str(network.id)),)).vm_uuid
    settle(services)
    vm = services.commands.load(vm_uuid)
    [(server_uuid, power)] = copies(services, vm_uuid)
    assert power == "stopped"  # created, never booted
    [nic] = vm.nic_list
    assert (vm.state, vm.server_uuid) == ("failed", None)
    assert claims(services, str(network.id)) == {nic["ip"]: vm_uuid}
    return vm_uuid, server_uuid, str(network.id), nic


@pytest.mark.parametrize("version", [1, 2])
def test_a_delete_of_a_failed_vm_that_kept_its_nics_removes_the_copy_then_frees_them(
        services, version):
    vm_uuid, server_uuid, network, nic = failed_keeping_a_copy(services)

    delete = act(services, vm_uuid, Action.DESTROY, version=version).job_uuid
    settle(services)

    done = job(services, delete)
    assert done["execution"] == "succeeded", done
    assert [(step["name"], step["error"]) for step in done["chain_results"]] == [
        ("unregister", None)]
    assert copies(services, vm_uuid) == []  # the copy is gone from its server
    assert services.commands.load(vm_uuid).state == "destroyed"
    assert claims(services, network) == {}


def test_a_delete_of_a_failed_vm_whose_copy_server_cannot_be_asked_keeps_its_nics(services):
    vm_uuid, server_uuid, network, nic = failed_keeping_a_copy(services)
    services.fleet.set_server_status(server_uuid, "unknown")

    delete = act(services, vm_uuid, Action.DESTROY).job_uuid
    settle(services)

    done = job(services, delete)
    assert done["execution"] == "failed", done
    assert server_uuid in done["error"] and "keeps its NICs" in done["error"], done["error"]
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.nic_list) == ("failed", [nic])
    assert claims(services, network) == {nic["ip"]: vm_uuid}
    assert copies(services, vm_uuid) == [(server_uuid, "stopped")]

    # the server answers again: a second DeleteVm removes the copy and frees the address
    services.fleet.set_server_status(server_uuid, "running")
    again = act(services, vm_uuid, Action.DESTROY).job_uuid
    settle(services)
    assert job(services, again)["execution"] == "succeeded"
    assert copies(services, vm_uuid) == []
    assert claims(services, network) == {}


def _running_with_a_nic_being_added(services) -> tuple[str, str, str, str, dict]:
    """A running VM on a network, and an add_nics of it queued: (VM, its server, the
    network, the add_nics job, the NIC the VM holds)."""
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    add = change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list
    services.projections.catch_up()
    return vm_uuid, server_uuid, network, add, nic


def _destroyed_at_once_on_a_removed_server(services, vm_uuid: str, server_uuid: str) -> None:
    """The VM's server recorded removed, then a v2 DELETE that destroys it at once."""
    services.commands.remove_server(server_uuid, cause=make_cause("operator"))
    services.projections.catch_up()
    assert act(services, vm_uuid, Action.DESTROY).job_uuid is None
