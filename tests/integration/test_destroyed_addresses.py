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

from domain.errors import ValidationError
from domain.states import Action
from domain.vm import make_cause
from service.commands.networks import NicRequest
from tests.builders import act, create, job
from tests.integration.test_canceled_jobs_fenced import fence_jobs, taken_by_a_fence, worker_b
from tests.integration.test_fencing import paused_in
from tests.integration.test_reconfigure_faults import (
    change, claims, copy_macs, running_vm_with_a_network,
)


def test_an_immediate_destroy_gives_the_address_to_no_one_before_its_fence_job_ran(
        services, monkeypatch, json_logs):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    add = change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list
    services.projections.catch_up()
    same_address = (NicRequest(network, ip=nic["ip"]),)
    taker: list[str] = []

    def meanwhile() -> None:
        services.commands.remove_server(server_uuid, cause=make_cause("operator"))
        services.projections.catch_up()
        assert act(services, vm_uuid, Action.DESTROY).job_uuid is None  # destroyed at once
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


def test_an_immediate_destroy_whose_fence_job_cannot_reach_the_node_keeps_the_address(
        services, monkeypatch):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list
    services.projections.catch_up()

    def meanwhile() -> None:
        services.commands.remove_server(server_uuid, cause=make_cause("operator"))
        services.projections.catch_up()
        assert act(services, vm_uuid, Action.DESTROY).job_uuid is None
        # the node cannot be reached: each attempt of the fence step fails
        services.fleet.faults.inject("inventory", "fail", services.worker.step_attempts)
        assert worker_b(services).run_vm(vm_uuid)

    paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile)

    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "failed", fence
    assert "addresses are kept" in fence["error"], fence["error"]
    # no fence went up, so A's call landed: the node has the NIC, and the address stays held
    assert copy_macs(services, vm_uuid, server_uuid) == [nic["mac"]]
    assert claims(services, network) == {nic["ip"]: vm_uuid}
