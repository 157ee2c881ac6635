"""Every job that asks a compute node to act on a VM's server fails once that server is
removed (api.md "Commands": ``server <uuid> is removed``), whether its node reported it gone
or an operator recorded it; a failed ``add_nics`` gives back the addresses it claimed, and a
failed ``remove_nics`` leaves the VM its NICs and their addresses."""

from __future__ import annotations

import pytest

from tests.api.helpers import act, act_and_wait, create_running_vm, get_vm, wait_job
from tests.api.test_delete_vm import REMOVALS, _remove_server_of
from tests.api.test_networks import in_use, make_network

# every action whose job touches the VM's server, with its body; ``stopped`` asks for a VM
# stopped before its server goes (a start of a running VM would succeed doing nothing)
ACTIONS = {
    "start": (None, True),
    "stop": (None, False),
    "reboot": (None, False),
    "update": ({"alias": "renamed"}, False),
    "add_nics": ({"networks": [{"name": "external"}]}, False),
    "remove_nics": ("first nic", False),
}


@pytest.mark.parametrize("route", REMOVALS.values(), ids=REMOVALS.keys())
@pytest.mark.parametrize("action", ACTIONS)
def test_a_job_on_a_vm_whose_server_was_removed_fails_naming_the_server(
        client, route, action) -> None:
    body, stopped = ACTIONS[action]
    network = make_network(client)
    vm_uuid = create_running_vm(client, networks=[network["uuid"]])
    if stopped:
        assert act_and_wait(client, vm_uuid, "stop")["execution"] == "succeeded"
    before = get_vm(client, vm_uuid)
    if body == "first nic":
        body = {"macs": [before["nics"][0]["mac"]]}
    server_uuid = _remove_server_of(client, vm_uuid, route)
    response = act(client, vm_uuid, action, json=body)
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_uuid"])
    assert (job["name"], job["execution"]) == (action, "failed")
    assert job["chain_results"][-1]["error"] == f"server {server_uuid} is removed"
    after = get_vm(client, vm_uuid)
    assert (after["state"], after["alias"]) == (before["state"], before["alias"])


@pytest.mark.parametrize("route", REMOVALS.values(), ids=REMOVALS.keys())
def test_a_failed_add_nics_removes_its_nics_and_gives_their_addresses_back(client, route):
    network = make_network(client)
    vm_uuid = create_running_vm(client, networks=[network["uuid"]])
    _remove_server_of(client, vm_uuid, route)
    added = act(client, vm_uuid, "add_nics", json={"networks": [network["uuid"]]})
    # (its address is claimed when asked for, but the background worker may already have
    # failed the job and given it back: only the end is certain)
    assert wait_job(client, added.json()["job_uuid"])["execution"] == "failed"
    assert [nic["ip"] for nic in get_vm(client, vm_uuid)["nics"]] == ["10.2.0.2"]
    assert in_use(client, network) == 1


@pytest.mark.parametrize("route", REMOVALS.values(), ids=REMOVALS.keys())
def test_a_failed_remove_nics_leaves_the_vm_its_nics_and_their_addresses(client, route):
    network = make_network(client)
    vm_uuid = create_running_vm(client, networks=[network["uuid"], network["uuid"]])
    before = get_vm(client, vm_uuid)["nics"]
    _remove_server_of(client, vm_uuid, route)
    removed = act(client, vm_uuid, "remove_nics", json={"macs": [before[0]["mac"]]})
    assert removed.status_code == 202, removed.text
    assert wait_job(client, removed.json()["job_uuid"])["execution"] == "failed"
    assert get_vm(client, vm_uuid)["nics"] == before
    assert in_use(client, network) == 2
    # the addresses are still the VM's: a new VM on the network gets the next ones
    other = create_running_vm(client, networks=[network["uuid"]])
    assert get_vm(client, other)["nics"][0]["ip"] == "10.2.0.4"
