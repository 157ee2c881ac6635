"""A VM whose provision failed holds no NIC and no address (VMAPI TRITON-394; upstream test
``failed_provision_has_no_nics``) once every server a copy may be on answered it has none: it
gives them back in the save that records it failed, however the provision failed (its compute
step, a takeover finding no copy), so the network hands them out again at once, a late call of
the lost worker is fenced off, and a later DeleteVm releases nothing twice. When a server did
not answer, or removing the copy failed, the failed VM keeps them: that copy may still be
configured with them. A log written when failed provisions kept their NICs reads as
it did, and its DeleteVm still gives them back."""

from __future__ import annotations

from typing import Any

from domain.lifecycle import CANCELED_BY_PROVISION_FAILURE
from domain.network import Network
from domain.vm import Vm, make_cause
from service.commands.networks import NicRequest
from service.jobs.compute.driver import ComputeError
from tests.api.helpers import V2, act, create_vm, get_vm, history_types, wait_job
from tests.builders import create, settle, stream
from tests.integration.test_fencing import paused_in
from tests.integration.test_job_faults import copies, rescuer

FAIL = {"force_provision_failure": True}


def fp_network(client) -> dict:
    """The tester's network: two addresses, 10.60.0.10 and 10.60.0.11."""
    response = client.post("/networks", json={
        "name": "fp", "subnet": "10.60.0.0/24", "provision_start_ip": "10.60.0.10",
        "provision_end_ip": "10.60.0.11"})
    assert response.status_code == 201, response.text
    return response.json()


def figures(client) -> tuple[int, int]:
    """``(addresses_in_use, addresses_free)`` of ``fp``, as ``GET /networks?name=fp`` says."""
    [network] = client.get("/networks", params={"name": "fp"}).json()
    return network["addresses_in_use"], network["addresses_free"]


def releases(services, network_uuid: str) -> list[str]:
    """The addresses the network's stream records released, in order."""
    return [e.ip for e in stream(services, network_uuid)
            if isinstance(e, Network.AddressReleased)]


def test_failed_provisions_give_their_addresses_back_and_a_delete_releases_none_again(
        client, services) -> None:
    # the tester's report: two failed VMs each kept a NIC, and a third CreateVm was refused
    network = fp_network(client)
    failed = [create_vm(client, networks=["fp"], ram=64, internal_metadata=FAIL)
              for _ in range(2)]
    for created in failed:
        assert wait_job(client, created["job_uuid"])["execution"] == "failed"
        vm = get_vm(client, created["vm_uuid"])
        assert (vm["state"], vm["server_uuid"], vm["nics"]) == ("failed", None, [])
        types = history_types(client, created["vm_uuid"])
        assert types.index("NicsRemoved") == types.index("ProvisionFailed") - 1  # one save
    assert figures(client) == (0, 2)
    third = create_vm(client, networks=["fp"], ram=64)
    assert wait_job(client, third["job_uuid"])["execution"] == "succeeded"
    assert [n["ip"] for n in get_vm(client, third["vm_uuid"])["nics"]] == ["10.60.0.10"]
    assert sorted(releases(services, network["uuid"])) == ["10.60.0.10", "10.60.0.11"]
    for created in failed:  # the addresses are the third VM's and free: nothing to release
        deleted = client.delete(f"/vms/{created['vm_uuid']}")
        assert wait_job(client, deleted.json()["job_uuid"])["execution"] == "succeeded"
        assert get_vm(client, created["vm_uuid"])["nics"] == []
    assert len(releases(services, network["uuid"])) == 2
    assert figures(client) == (1, 1)
    assert services.commands.load_network(network["uuid"]).claims == {
        "10.60.0.10": third["vm_uuid"]}


def _one_address_and_a_vm_asking_it(services) -> tuple[Any, tuple[NicRequest, ...], Any]:
    """A network of one address (10.60.0.10), the NIC request for it, and a VM created with
    it (its provision queued, not run)."""
    network, _ = services.commands.create_network(
        name="fp", subnet="10.60.0.0/24", provision_start_ip="10.60.0.10",
        provision_end_ip="10.60.0.10", gateway=None, cause=make_cause())
    asked = (NicRequest(str(network.id)),)
    return network, asked, create(services, networks=asked)


def test_a_provision_a_takeover_fails_gives_its_address_to_no_one_twice(
        services, monkeypatch) -> None:
    # Worker A is paused in its ensure_registered; B takes the provision over, finds no copy
    # and fails it, giving its address back, which another VM is then given. A resumes: its
    # call is fenced off, so no copy of the failed VM uses that address on a node.
    network, asked, accepted = _one_address_and_a_vm_asking_it(services)
    taker: list[str] = []

    def meanwhile() -> None:
        assert rescuer(services, "b").run_vm(accepted.vm_uuid)
        taker.append(create(services, networks=asked).vm_uuid)

    assert paused_in(services, monkeypatch, "ensure_registered", accepted.vm_uuid,
                     meanwhile) == ["place"]
    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid, vm.nic_list) == ("failed", None, [])
    assert copies(services, accepted.vm_uuid) == []
    settle(services)  # the other VM provisions on the address
    assert services.commands.load_network(network.id).claims == {"10.60.0.10": taker[0]}
    assert services.commands.load(taker[0]).state == "running"


def test_a_takeover_that_cannot_ask_a_server_keeps_the_failed_vms_address(
        services, monkeypatch) -> None:
    # A reviewer's case: worker A is paused after creating the copy; its server goes
    # ``unknown``, so B's takeover finds no copy among the servers that answer and fails the
    # provision. The server comes back with the copy still configured with 10.60.0.10: the
    # address stays the failed VM's, and no other VM is given it.
    network, asked, accepted = _one_address_and_a_vm_asking_it(services)
    where: list[str] = []

    def meanwhile() -> None:
        where.append(services.commands.load(accepted.vm_uuid).claim["server_uuid"])
        services.fleet.set_server_status(where[0], "unknown")
        assert rescuer(services, "b").run_vm(accepted.vm_uuid)
        services.fleet.set_server_status(where[0], "running")

    assert paused_in(services, monkeypatch, "ensure_state", accepted.vm_uuid,
                     meanwhile) == ["place", "ensure_registered"]
    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid) == ("failed", None)
    assert [nic["ip"] for nic in vm.nic_list] == ["10.60.0.10"]
    assert "NicsRemoved" not in [type(e).__name__ for e in stream(services, accepted.vm_uuid)]
    # A's late boot refused: the simulator's fences are per VM (docs/simulation.md, its known
    # limit); a real node that never saw B's fence would admit it
    assert copies(services, accepted.vm_uuid) == [(where[0], "stopped")]
    assert services.commands.load_network(network.id).claims == {
        "10.60.0.10": accepted.vm_uuid}


def test_a_provision_whose_copy_could_not_be_removed_keeps_its_address(
        client, services, monkeypatch) -> None:
    # its step failed and the cleanup's unregister failed too: a copy may be left on the
    # server it claimed, so the failure gives nothing back
    def unreachable(*args, **kwargs) -> None:
        raise ComputeError("server unreachable")

    monkeypatch.setattr(services.fleet, "unregister", unreachable)
    fp_network(client)
    created = create_vm(client, networks=["fp"], ram=64, internal_metadata=FAIL)
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    vm = get_vm(client, created["vm_uuid"])
    assert (vm["state"], vm["server_uuid"]) == ("failed", None)
    assert [n["ip"] for n in vm["nics"]] == ["10.60.0.10"]
    assert "NicsRemoved" not in history_types(client, created["vm_uuid"])
    assert figures(client) == (1, 1)


def test_a_vm_stored_when_a_failed_provision_kept_its_nics_keeps_them_until_deleted(
        client, services, monkeypatch) -> None:
    network = fp_network(client)
    # the log as an older version wrote it: ProvisionFailed with no NicsRemoved
    monkeypatch.setattr(Vm, "give_back_nics", lambda self, *, cause: [])
    old = create_vm(client, networks=["fp"], ram=64, internal_metadata=FAIL)
    assert wait_job(client, old["job_uuid"])["execution"] == "failed"
    monkeypatch.undo()
    assert "NicsRemoved" not in history_types(client, old["vm_uuid"])
    assert [n["ip"] for n in get_vm(client, old["vm_uuid"])["nics"]] == ["10.60.0.10"]
    assert figures(client) == (1, 1)
    deleted = client.delete(f"/vms/{old['vm_uuid']}")
    assert wait_job(client, deleted.json()["job_uuid"])["execution"] == "succeeded"
    assert figures(client) == (0, 2)
    assert releases(services, network["uuid"]) == ["10.60.0.10"]


def test_nic_jobs_queued_behind_the_failed_provision_neither_add_nor_remove_a_nic(
        paused) -> None:
    # version 2 queues them behind the provision: the add_nics's NIC went back with the
    # failure, so it ends canceled; the remove_nics finds its NIC gone and has nothing to do
    client = paused.http
    fp_network(client)
    created = create_vm(client, networks=["fp"], ram=64, internal_metadata=FAIL)
    [mac] = [n["mac"] for n in get_vm(client, created["vm_uuid"])["nics"]]
    removal = act(client, created["vm_uuid"], "remove_nics", headers=V2, json={"macs": [mac]})
    addition = act(client, created["vm_uuid"], "add_nics", headers=V2, json={"networks": ["fp"]})
    assert (removal.status_code, addition.status_code) == (202, 202), addition.text
    assert figures(client) == (2, 0)
    paused.run_jobs()
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    added = wait_job(client, addition.json()["job_uuid"])
    assert (added["execution"], added["error"]) == ("canceled", CANCELED_BY_PROVISION_FAILURE)
    removed = wait_job(client, removal.json()["job_uuid"])
    assert removed["execution"] == "succeeded"
    assert "already removed" in removed["chain_results"][-1]["result"]
    assert get_vm(client, created["vm_uuid"])["nics"] == []
    assert figures(client) == (0, 2)
