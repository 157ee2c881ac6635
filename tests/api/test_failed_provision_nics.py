"""A VM whose provision failed holds no NIC and no address (VMAPI TRITON-394; upstream test
``failed_provision_has_no_nics``) once every server a copy may be on answered it has none: it
gives them back in the save that records it failed, however the provision failed (its compute
step, a takeover finding no copy), so the network hands them out again at once, a late call of
the lost worker is fenced off, and a later DeleteVm releases nothing twice. When a server did
not answer, or removing the copy failed, the failed VM keeps them: that copy may still be
configured with them. A takeover that cannot ask the server the copy may be on decides
nothing until it answers: that server never saw its fence. A log written when failed provisions kept their NICs reads as
it did, and its DeleteVm still gives them back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from domain.lifecycle import CANCELED_BY_PROVISION_FAILURE
from domain.network import Network
from domain.vm import Vm, make_cause
from service.commands.networks import NicRequest
from service.jobs.compute.driver import ComputeError
from tests.api.helpers import V2, act, create_vm, get_vm, history_types, wait_job
from tests.builders import create, settle, stream
from tests.integration.test_fencing import paused_in
from tests.integration.test_job_faults import copies, rescuer, steps_by

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
    # Worker A is paused in its ensure_registered; B takes the provision over with no
    # attempts left (with some, it carries it on: row P1), finds no copy and fails it,
    # giving its address back, which another VM is then given. A resumes: its call is
    # fenced off, so no copy of the failed VM uses that address on a node.
    network, asked, accepted = _one_address_and_a_vm_asking_it(services)
    taker: list[str] = []

    def meanwhile() -> None:
        b = rescuer(services, "b")
        b.max_attempts = 1
        assert b.run_vm(accepted.vm_uuid)
        taker.append(create(services, networks=asked).vm_uuid)

    assert paused_in(services, monkeypatch, "ensure_registered", accepted.vm_uuid,
                     meanwhile) == ["place"]
    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid, vm.nic_list) == ("failed", None, [])
    assert copies(services, accepted.vm_uuid) == []
    settle(services)  # the other VM provisions on the address
    assert services.commands.load_network(network.id).claims == {"10.60.0.10": taker[0]}
    assert services.commands.load(taker[0]).state == "running"


def _taken_over_while_its_server_is_unknown(services, monkeypatch, json_logs, vm_uuid: str,
                                            then: Callable[[], None]) -> str:
    """Worker A creates the VM's copy on the server it claimed and is paused before booting
    it; that server goes ``unknown``, and B's takeover, which cannot ask it, is checked to
    decide nothing, even with no attempts left; the server comes back and ``then()`` runs;
    then A resumes, its late boot asked of that server, and is checked to be refused there
    by a newer fence, recording nothing more. Returns the server."""
    where: list[str] = []

    def meanwhile() -> None:
        where.append(services.commands.load(vm_uuid).claim["server_uuid"])
        services.fleet.set_server_status(where[0], "unknown")
        b = rescuer(services, "b")
        b.max_attempts = 1  # giving up waits the same way
        assert b.run_vm(vm_uuid)
        vm = services.commands.load(vm_uuid)
        assert (vm.state, vm.head_job["execution"]) == ("provisioning", "running")
        assert [nic["ip"] for nic in vm.nic_list] == ["10.60.0.10"]
        assert "ProvisionFailed" not in event_names(services, vm_uuid)
        [waited] = [e.step for e in stream(services, vm_uuid)
                    if isinstance(e, Vm.JobStepRecorded) and e.cause["actor"] == "worker:b"]
        assert waited["name"] == "reconcile" and where[0] in waited["error"], waited
        services.fleet.set_server_status(where[0], "running")
        then()

    assert paused_in(services, monkeypatch, "ensure_state", vm_uuid,
                     meanwhile) == ["place", "ensure_registered"]
    [taken] = [line["message"] for line in json_logs() if "was taken from" in line["message"]
               and line.get("actor") == f"worker:{services.worker.worker_id}"]
    assert f"fenced off: VM {vm_uuid} has seen epoch" in taken and where[0] in taken, taken
    return where[0]


def event_names(services, vm_uuid: str) -> list[str]:
    """The names of the VM's events, in order."""
    return [type(e).__name__ for e in stream(services, vm_uuid)]


def test_a_takeover_that_cannot_ask_a_server_a_copy_may_be_on_waits_until_it_answers(
        services, monkeypatch, json_logs) -> None:
    # A reviewer's case: failing the provision while the copy's server could not be asked
    # left that server unfenced, and A's late boot ran the failed VM's copy there. B waits
    # instead; C, once the server answers, finds the copy A created, never booted, and
    # boots it: the provision ends well, once, and A's late boot is refused there.
    network, _asked, accepted = _one_address_and_a_vm_asking_it(services)
    server = _taken_over_while_its_server_is_unknown(
        services, monkeypatch, json_logs, accepted.vm_uuid,
        lambda: rescuer(services, "c", leases_later=4).run_vm(accepted.vm_uuid))
    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid, vm.head_job) == ("running", server, None)
    assert [nic["ip"] for nic in vm.nic_list] == ["10.60.0.10"]
    assert copies(services, accepted.vm_uuid) == [(server, "running")]
    assert services.fleet.boots(accepted.vm_uuid) == 1
    assert steps_by(services, accepted.vm_uuid, "c")[0] == "reconcile"
    assert services.commands.load_network(network.id).claims == {
        "10.60.0.10": accepted.vm_uuid}


def test_the_lost_workers_late_boot_is_refused_on_the_server_that_came_back(
        services, monkeypatch, json_logs) -> None:
    # as above, but C has no attempts left either: it removes the copy A created, fails the
    # provision and gives its address back (every server answered), which another VM is
    # then given; A's late boot on that server is refused, so no copy of the failed VM runs
    # there with the address
    network, asked, accepted = _one_address_and_a_vm_asking_it(services)
    taker: list[str] = []

    def c_gives_up() -> None:
        c = rescuer(services, "c", leases_later=4)
        c.max_attempts = 1
        assert c.run_vm(accepted.vm_uuid)
        taker.append(create(services, networks=asked).vm_uuid)

    _taken_over_while_its_server_is_unknown(services, monkeypatch, json_logs, accepted.vm_uuid,
                                            c_gives_up)
    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid, vm.nic_list) == ("failed", None, [])
    assert event_names(services, accepted.vm_uuid).count("ProvisionFailed") == 1
    assert copies(services, accepted.vm_uuid) == []
    assert services.fleet.boots(accepted.vm_uuid) == 0
    settle(services)  # the other VM provisions on the address, on any server
    assert services.commands.load(taker[0]).state == "running"
    assert services.commands.load_network(network.id).claims == {"10.60.0.10": taker[0]}


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


def test_a_takeover_waiting_for_a_server_is_not_taken_for_a_lost_worker_nor_given_up(
        services, monkeypatch, json_logs) -> None:
    # each lease that a waiting provision is asked again used to count and log as a lost
    # worker's takeover (the lost-workers alert firing while no worker died), and its
    # attempts passed max_attempts: a re-take after a wait now counts neither
    from service import metrics

    network, _asked, accepted = _one_address_and_a_vm_asking_it(services)
    vm_uuid = accepted.vm_uuid
    takeovers: list[float] = []

    def meanwhile() -> None:
        server = services.commands.load(vm_uuid).claim["server_uuid"]
        services.fleet.set_server_status(server, "unknown")
        before = metrics.LEASE_TAKEOVERS._value.get()
        assert rescuer(services, "b").run_vm(vm_uuid)  # A was lost: a takeover, then a wait
        takeovers.append(metrics.LEASE_TAKEOVERS._value.get() - before)
        for n in range(services.worker.max_attempts + 2):  # waiting still, lease after lease
            assert rescuer(services, f"w{n}", leases_later=4 + 2 * n).run_vm(vm_uuid)
        takeovers.append(metrics.LEASE_TAKEOVERS._value.get() - before)
        vm = services.commands.load(vm_uuid)
        assert (vm.state, vm.head_job["execution"]) == ("provisioning", "running")
        assert "gave up" not in str([e.step for e in stream(services, vm_uuid)
                                     if isinstance(e, Vm.JobStepRecorded)])
        services.fleet.set_server_status(server, "running")
        assert rescuer(services, "z", leases_later=40).run_vm(vm_uuid)

    paused_in(services, monkeypatch, "ensure_state", vm_uuid, meanwhile)
    assert takeovers == [1, 1]
    started = [line["message"] for line in json_logs() if " started (attempt" in line["message"]
               and line.get("actor") in {f"worker:w{n}" for n in range(10)}]
    assert len(started) == services.worker.max_attempts + 2, started
    assert not [m for m in started if "taken over" in m], started
    assert all("after a wait" in m for m in started), started
    assert services.commands.load(vm_uuid).state == "running"
