"""A ``remove_nics`` job whose NICs another job removed first (api.md "Networks and NICs";
service/jobs/handlers.py ``nics_changed``): a repeat with another job queued between is a
new job (the repeat rule), and when it runs it succeeds as VMAPI's does (NIC jobs succeed
when their target already holds), saying it had nothing to remove, and records no
``NicsRemoved`` for a NIC it did not remove."""

from __future__ import annotations

from tests.api.helpers import act, create_vm, get_vm, history_types, sim_row, wait_job
from tests.api.test_networks import in_use, make_network


def _vm_with_two_nics(paused) -> tuple[str, dict, list[str]]:
    """A running VM with two NICs on a new network: its uuid, the network, the two MACs."""
    network = make_network(paused.http)
    created = create_vm(paused.http, networks=[network["uuid"], network["uuid"]])
    paused.run_jobs()
    vm_uuid = created["vm_uuid"]
    return vm_uuid, network, [n["mac"] for n in get_vm(paused.http, vm_uuid)["nics"]]


def _queued(http, vm_uuid: str, action: str, body: dict) -> str:
    response = act(http, vm_uuid, action, json=body)
    assert response.status_code == 202, response.text
    return response.json()["job_uuid"]


def test_a_remove_nics_of_a_nic_removed_by_an_earlier_job_removes_nothing_and_says_so(
        paused) -> None:
    # the bug: the second job 'succeeded' with apply_nics {macs: [A]} and no NicsRemoved,
    # a job saying it removed a NIC it did not remove
    http = paused.http
    vm_uuid, network, (first_mac, second_mac) = _vm_with_two_nics(paused)
    first = _queued(http, vm_uuid, "remove_nics", {"macs": [first_mac]})
    _queued(http, vm_uuid, "update", {"alias": "between"})  # so the repeat is no repeat
    second = _queued(http, vm_uuid, "remove_nics", {"macs": [first_mac]})
    assert second != first
    paused.run_jobs()
    config_after_first = sim_row(paused.services, vm_uuid)["config"]

    assert wait_job(http, first)["chain_results"][-1]["result"] == {"macs": [first_mac]}
    job = wait_job(http, second)
    assert job["execution"] == "succeeded"
    assert [(step["name"], step["result"], step["error"]) for step in job["chain_results"]] \
        == [("remove_nics", f"already removed: the VM has no NIC {first_mac}: nothing to do",
             None)]  # and no node was asked
    assert history_types(http, vm_uuid).count("NicsRemoved") == 1
    assert [n["mac"] for n in get_vm(http, vm_uuid)["nics"]] == [second_mac]
    assert sim_row(paused.services, vm_uuid)["config"] == config_after_first
    assert in_use(http, network) == 1


def test_a_remove_nics_of_a_removed_nic_and_another_removes_the_other_and_names_both(
        paused) -> None:
    http = paused.http
    vm_uuid, network, (first_mac, second_mac) = _vm_with_two_nics(paused)
    _queued(http, vm_uuid, "remove_nics", {"macs": [first_mac]})
    both = _queued(http, vm_uuid, "remove_nics", {"macs": [first_mac, second_mac]})
    paused.run_jobs()

    job = wait_job(http, both)
    assert job["execution"] == "succeeded"
    applied = [step for step in job["chain_results"] if step["name"] == "apply_nics"]
    assert [step["result"] for step in applied] == [
        {"macs": [second_mac], "already_removed": [first_mac]}]
    assert history_types(http, vm_uuid).count("NicsRemoved") == 2  # one per NIC
    assert get_vm(http, vm_uuid)["nics"] == []
    assert in_use(http, network) == 0
