"""VM actions refused (api.md, "Errors", "DeleteVm and actions: version 1 vs version 2"): an
impossible transition is 409 with the VM's state and the actions it allows, a VM on no server
is refused up front in the version's words, and a refusal appends nothing."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import (
    V2,
    act,
    act_and_wait,
    assert_error,
    create_running_vm,
    create_vm,
    get_vm,
    wait_job,
)


def test_an_impossible_action_is_409_invalid_transition_with_state_and_allowed_actions(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    destroy = client.delete(f"/vms/{vm_uuid}")
    wait_job(client, destroy.json()["job_uuid"])
    version = services.commands.load(vm_uuid).version
    for headers in ({}, V2):
        for action in ("start", "stop", "reboot", "update"):
            change = {"alias": "renamed"} if action == "update" else None
            body = assert_error(act(client, vm_uuid, action, headers=headers, json=change),
                                409, "InvalidTransition")
            assert body["state"] == "destroyed"
            # version 2 refuses a DELETE of a destroyed VM (VmAlreadyDestroyed): none is left
            assert body["allowed_actions"] == ([] if headers else ["destroy"])
    body = assert_error(client.delete(f"/vms/{vm_uuid}", headers=V2), 409,
                        "VmAlreadyDestroyed")
    assert (body["state"], body["allowed_actions"]) == ("destroyed", [])  # contract tester
    reboot_stopped = create_running_vm(client)
    act_and_wait(client, reboot_stopped, "stop")
    body = assert_error(act(client, reboot_stopped, "reboot"), 409, "InvalidTransition")
    assert body["state"] == "stopped" and "reboot" not in body["allowed_actions"]
    assert "start" in body["allowed_actions"]
    assert services.commands.load(vm_uuid).version == version  # nothing was appended


def test_a_refused_release_or_quarantine_names_only_actions_a_vm_on_no_server_allows(
        client, services) -> None:
    created = create_vm(client, internal_metadata={"force_provision_failure": True})
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    vm_uuid = created["vm_uuid"]
    assert get_vm(client, vm_uuid)["server_uuid"] is None  # failed before any server had it
    for headers in ({}, V2):
        body = assert_error(act(client, vm_uuid, "release", headers=headers), 409,
                            "InvalidTransition")
        assert body["allowed_actions"] == ["update", "destroy", "quarantine"]
        for action in ("start", "stop", "kill"):  # what it leaves out is refused
            assert act(client, vm_uuid, action, headers=headers).status_code == 409
    # a destroyed VM on no server: quarantine's refusal names the same as every action's
    destroyed = client.delete(f"/vms/{vm_uuid}", headers=V2)
    assert wait_job(client, destroyed.json()["job_uuid"])["execution"] == "succeeded"
    for headers, allowed in (({}, ["destroy"]), (V2, [])):  # v2 refuses its DELETE
        body = assert_error(act(client, vm_uuid, "quarantine", headers=headers,
                                json={"reason": "x"}), 409, "InvalidTransition")
        assert body["allowed_actions"] == allowed


def test_v1_action_on_a_provisioning_vm_is_409_unallocated_vm_and_appends_nothing(
        paused, services) -> None:
    created = create_vm(paused.http)
    head = services.commands.head_position()
    for action in ("start", "stop", "reboot", "kill"):
        body = assert_error(act(paused.http, created["vm_uuid"], action), 409, "UnallocatedVM")
        # every refusal because of state names what version 1 allows (contract tester)
        assert (body["state"], body["allowed_actions"]) == ("provisioning", ["quarantine"])
        # VMAPI's words (lib/endpoints/vms.js), found by a tester: ours said "no server_uuid"
        assert body["message"] == f"Cannot call {action} for a VM that has not been provisioned yet"
    assert services.commands.head_position() == head


@pytest.mark.parametrize("action", ["start", "stop", "kill"])
def test_an_action_on_a_vm_on_no_server_is_refused_up_front_and_appends_nothing(
        client, services, action) -> None:
    """Found by a tester: a VM whose provision failed before placing it (failed, no
    server_uuid) took start, stop and kill with 202 and a job that always failed; the rules
    table said allowed, the job's handler said no server. Version 1 answers as VMAPI does for
    a VM with no server_uuid, version 2 as for any impossible action; neither lists an action
    it would refuse as allowed."""
    created = create_vm(client, internal_metadata={"force_provision_failure": True})
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    vm_uuid = created["vm_uuid"]
    assert (get_vm(client, vm_uuid)["state"], get_vm(client, vm_uuid)["server_uuid"]) == (
        "failed", None)
    head = services.commands.head_position()
    v1 = assert_error(act(client, vm_uuid, action), 409, "UnallocatedVM")
    assert v1["message"] == f"Cannot {action} a VM with no server_uuid (state 'failed')", v1
    assert v1["allowed_actions"] == ["update", "destroy", "quarantine"], v1
    v2 = assert_error(act(client, vm_uuid, action, headers=V2), 409, "InvalidTransition")
    assert v2["allowed_actions"] == ["update", "destroy", "quarantine"], v2
    reboot = assert_error(act(client, vm_uuid, "reboot"), 409, "InvalidTransition")
    assert reboot["allowed_actions"] == v2["allowed_actions"], reboot
    assert services.commands.head_position() == head


def test_a_reboot_on_no_server_is_unallocated_only_where_the_state_allows_a_reboot(
        client, services) -> None:
    """docs/api.md's row of a VM on no server: a running one's reboot is UnallocatedVM in
    version 1; a failed one's is impossible in its state first, in both versions."""
    running = str(uuid.uuid4())  # reported running by its agent, on no server
    assert client.put(f"/vms/{running}", json={"uuid": running, "state": "running"}
                      ).status_code == 200
    head = services.commands.head_position()
    assert_error(act(client, running, "reboot"), 409, "UnallocatedVM")
    assert_error(act(client, running, "reboot", headers=V2), 409, "InvalidTransition")
    assert services.commands.head_position() == head
    created = create_vm(client, internal_metadata={"force_provision_failure": True})
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    head = services.commands.head_position()
    for headers in ({}, V2):
        body = assert_error(act(client, created["vm_uuid"], "reboot", headers=headers), 409,
                            "InvalidTransition")
        assert body["message"] == "Cannot reboot a VM in state 'failed'", body
    assert services.commands.head_position() == head


def test_a_refusal_names_the_nic_changes_the_vm_takes(client) -> None:
    # operator tester: a release refused on a running VM named every action but add_nics and
    # remove_nics, which the VM then took
    network = client.post("/networks", json={
        "name": "named", "subnet": "10.62.0.0/24", "provision_start_ip": "10.62.0.10",
        "provision_end_ip": "10.62.0.20"}).json()
    vm_uuid = create_running_vm(client)
    for headers in ({}, V2):
        body = assert_error(act(client, vm_uuid, "release", headers=headers), 409,
                            "InvalidTransition")
        assert body["allowed_actions"] == [
            "start", "stop", "kill", "reboot", "update", "add_nics", "remove_nics", "destroy",
            "quarantine"]
        added = act(client, vm_uuid, "add_nics", headers=headers,
                    json={"networks": [network["uuid"]]})
        assert added.status_code == 202, added.text
