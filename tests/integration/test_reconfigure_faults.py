"""``reconfigure`` (the ``update``, ``add_nics`` and ``remove_nics`` jobs' step) under the
simulator's faults, on both backends (docs/simulation.md, "Faults"; docs/jobs.md): a repeat
after a lost response or a takeover changes the VM's copy no more than once, and a failed
``remove_nics`` leaves the VM's NICs and their address claims as they were."""

from __future__ import annotations

from typing import Any

import pytest

from domain.states import Action
from domain.vm import make_cause
from service.commands.networks import NicRequest
from service.commands.nic_actions import change_nics
from service.commands.versioning import NEWEST
from service.jobs.compute.sim_config import reconfigured
from tests.builders import act, create, job, settle
from tests.integration.test_job_faults import WorkerDied, dies_once, rescuer, steps_by

NIC_A = {"mac": "02:00:00:00:00:0a", "ip": "10.5.0.2"}
NIC_B = {"mac": "02:00:00:00:00:0b", "ip": "10.5.0.3"}


@pytest.mark.parametrize("changes", [
    {"alias": "web", "tags": {"role": "db"}},
    {"add_nics": {"nics": [NIC_A, NIC_B]}},
    {"remove_nics": {"macs": [NIC_A["mac"], "02:00:00:00:00:ff"]}},
], ids=["whole-values", "add_nics", "remove_nics"])
def test_a_change_applied_again_changes_the_configuration_no_more(changes):
    before = {"alias": "old", "nics": [NIC_A]}
    once = reconfigured(before, changes)
    assert reconfigured(once, changes) == once
    assert before == {"alias": "old", "nics": [NIC_A]}  # not changed in place


def running_vm_with_a_network(services) -> tuple[str, str, str]:
    """A running VM, its server, and a network with addresses free (uuid)."""
    network, _ = services.commands.create_network(
        name="n", subnet="10.5.0.0/29", provision_start_ip="10.5.0.2",
        provision_end_ip="10.5.0.5", gateway=None, cause=make_cause())
    accepted = create(services)
    settle(services)
    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "running"
    return accepted.vm_uuid, vm.server_uuid, str(network.id)


def change(services, vm_uuid: str, **nics: Any) -> str:
    """An ``add_nics`` (``add=[network uuid]``) or ``remove_nics`` (``remove=[mac]``); its
    job."""
    if "add" in nics:
        nics["add"] = [NicRequest(network) for network in nics["add"]]
    return change_nics(services.commands, vm_uuid, behaviour=NEWEST, cause=make_cause(),
                       **nics).job_uuid


def copy_macs(services, vm_uuid: str, server_uuid: str) -> list[str]:
    """The MACs of the NICs the VM's copy was configured with (``reconfigure``)."""
    return [nic["mac"] for nic in services.fleet.config(server_uuid, vm_uuid).get("nics", [])]


def claims(services, network_uuid: str) -> dict[str, str]:
    return services.commands.load_network(network_uuid).claims


def test_an_add_nics_whose_response_was_lost_is_applied_once(services):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    services.fleet.faults.inject("reconfigure", "lose_response", 1)
    job_uuid = change(services, vm_uuid, add=[network])
    settle(services)

    done = job(services, job_uuid)
    assert done["execution"] == "succeeded"
    tries = [s for s in done["chain_results"] if s["name"] == "apply_nics"]
    assert len(tries) == 2 and "timed out" in tries[0]["error"] and tries[1]["error"] is None
    macs = [nic["mac"] for nic in services.commands.load(vm_uuid).nic_list]
    assert copy_macs(services, vm_uuid, server_uuid) == macs and len(macs) == 1


def test_an_add_nics_taken_over_after_its_worker_died_is_applied_once(services, monkeypatch):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    job_uuid = change(services, vm_uuid, add=[network])
    services.projections.catch_up()
    dies_once(monkeypatch, services.fleet, "reconfigure", after_the_work=True)
    with pytest.raises(WorkerDied):
        services.worker.run_vm(vm_uuid)
    assert len(copy_macs(services, vm_uuid, server_uuid)) == 1  # applied, not recorded

    assert rescuer(services).run_vm(vm_uuid)

    assert job(services, job_uuid)["execution"] == "succeeded"
    assert steps_by(services, vm_uuid, "rescuer") == ["apply_nics"]
    macs = [nic["mac"] for nic in services.commands.load(vm_uuid).nic_list]
    assert copy_macs(services, vm_uuid, server_uuid) == macs and len(macs) == 1


def test_a_remove_nics_taken_over_after_its_worker_died_records_the_removal_once(
        services, monkeypatch):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    change(services, vm_uuid, add=[network, network])
    settle(services)
    kept, removed = services.commands.load(vm_uuid).nic_list
    job_uuid = change(services, vm_uuid, remove=[removed["mac"]])
    services.projections.catch_up()
    dies_once(monkeypatch, services.fleet, "reconfigure", after_the_work=True)
    with pytest.raises(WorkerDied):
        services.worker.run_vm(vm_uuid)
    # the node applied it; the log records the removal only once the job does
    assert [nic["mac"] for nic in services.commands.load(vm_uuid).nic_list] == [
        kept["mac"], removed["mac"]]

    assert rescuer(services).run_vm(vm_uuid)

    assert job(services, job_uuid)["execution"] == "succeeded"
    assert services.commands.load(vm_uuid).nic_list == [kept]
    assert copy_macs(services, vm_uuid, server_uuid) == [kept["mac"]]
    assert claims(services, network) == {kept["ip"]: vm_uuid}


def test_a_failed_remove_nics_leaves_the_nics_and_their_claims_as_they_were(services):
    vm_uuid, _server_uuid, network = running_vm_with_a_network(services)
    change(services, vm_uuid, add=[network, network])
    settle(services)
    before = services.commands.load(vm_uuid).nic_list
    held = claims(services, network)
    services.fleet.faults.inject("reconfigure", "fail", services.worker.step_attempts)
    job_uuid = change(services, vm_uuid, remove=[before[0]["mac"]])
    settle(services)

    failed = job(services, job_uuid)
    assert failed["execution"] == "failed"
    assert failed["chain_results"][-1]["error"] == "injected failure of reconfigure"
    assert services.commands.load(vm_uuid).nic_list == before
    assert claims(services, network) == held and len(held) == 2
    services.projections.catch_up()
    assert services.networks.get(network)["addresses_in_use"] == 2


def test_a_failed_update_leaves_the_vm_as_it_was(services):
    vm_uuid, server_uuid, _network = running_vm_with_a_network(services)
    services.fleet.faults.inject("reconfigure", "fail", services.worker.step_attempts)
    accepted = act(services, vm_uuid, Action.UPDATE, args={"alias": "renamed"})
    settle(services)

    assert job(services, accepted.job_uuid)["execution"] == "failed"
    assert services.commands.load(vm_uuid).alias != "renamed"
    assert services.fleet.config(server_uuid, vm_uuid) == {}
