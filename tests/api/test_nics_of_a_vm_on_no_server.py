"""A NIC change is carried out on the VM's server (its job asks the server to apply it:
docs/jobs.md, "Reconfigure"), so a VM on no server that is not provisioning (its provision
failed before placing it) has no node to change. ``add_nics`` on such a VM used to be
accepted: it claimed an address, and its job "succeeded" asking no node, so a failed VM,
which holds no NIC (TRITON-394), held one again. It is now refused up front as start and
stop are on such a VM (docs/api.md, "Contract: DeleteVm and actions"): version 1
``UnallocatedVM``, version 2 ``InvalidTransition``, both 409 and naming the state, and
nothing is recorded. ``remove_nics`` alike."""

from __future__ import annotations

import pytest

from service.jobs.compute.driver import ComputeError

from tests.api.helpers import V2, act, create_vm, get_vm, wait_job
from tests.api.test_failed_provision_nics import FAIL, figures, fp_network

V1_REFUSAL = ("UnallocatedVM", "Cannot {action} a VM with no server_uuid (state 'failed')")
V2_REFUSAL = ("InvalidTransition", "Cannot {action} a VM in state 'failed' with no server_uuid")


def failed_on_no_server(client) -> dict:
    """A VM whose provision failed before placing it: ``failed``, no server, no NIC."""
    fp_network(client)
    created = create_vm(client, networks=["fp"], ram=64, internal_metadata=FAIL)
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    vm = get_vm(client, created["vm_uuid"])
    assert (vm["state"], vm["server_uuid"], vm["nics"]) == ("failed", None, [])
    return vm


@pytest.mark.parametrize(("action", "body"), [
    ("add_nics", {"networks": ["fp"]}),
    ("remove_nics", {"macs": ["02:00:00:00:00:01"]}),
], ids=["add_nics", "remove_nics"])
@pytest.mark.parametrize(("headers", "refusal"), [(None, V1_REFUSAL), (V2, V2_REFUSAL)],
                         ids=["v1", "v2"])
def test_a_nic_change_of_a_failed_vm_on_no_server_is_refused_and_changes_nothing(
        client, action, body, headers, refusal):
    vm = failed_on_no_server(client)
    jobs = client.get(f"/vms/{vm['uuid']}/jobs").json()

    response = act(client, vm["uuid"], action, headers=headers, json=body)

    assert response.status_code == 409, response.text
    code, message = refusal
    assert response.json() == {
        "code": code, "message": message.format(action=action), "state": "failed",
        "allowed_actions": ["update", "destroy", "quarantine"]}
    after = get_vm(client, vm["uuid"])
    assert (after["version"], after["nics"]) == (vm["version"], [])
    assert figures(client) == (0, 2)  # no address claimed
    assert client.get(f"/vms/{vm['uuid']}/jobs").json() == jobs  # no job queued


def test_an_add_nics_queued_behind_a_provision_that_failed_on_no_server_fails_at_its_turn(
        paused, monkeypatch):
    # version 2 queues it behind the provision; the provision fails and cannot remove its
    # copy (its server may still have one, so the VM keeps its NIC and the add_nics stays
    # queued); at its turn the VM is on no server: it fails and gives its NIC back
    def unreachable(*args, **kwargs) -> None:
        raise ComputeError("server unreachable")

    monkeypatch.setattr(paused.services.fleet, "unregister", unreachable)
    client = paused.http
    fp_network(client)
    created = create_vm(client, networks=["fp"], ram=64, internal_metadata=FAIL)
    addition = act(client, created["vm_uuid"], "add_nics", headers=V2,
                   json={"networks": ["fp"]})
    assert addition.status_code == 202, addition.text
    assert figures(client) == (2, 0)

    paused.run_jobs()

    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    added = wait_job(client, addition.json()["job_uuid"])
    assert added["execution"] == "failed"
    assert added["error"] == V2_REFUSAL[1].format(action="add_nics")
    vm = get_vm(client, created["vm_uuid"])
    assert (vm["state"], vm["server_uuid"]) == ("failed", None)
    assert [nic["ip"] for nic in vm["nics"]] == ["10.60.0.10"]  # the provision's, kept
    assert figures(client) == (1, 1)  # the add_nics's address given back
