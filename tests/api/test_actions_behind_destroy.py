"""Actions asked while the VM's destroy is queued or running (api.md, "Contract: DeleteVm and
actions"). A tester's finding: with version 2, a start, stop, reboot or update sent after a
DELETE was answered 202 and queued a job behind the destroy, and each failed once the destroy
had run ("Cannot start a VM in state 'destroyed'"). Version 2 now refuses at once what could
only fail there, `409 VmBeingDestroyed` naming the destroy job, and changes nothing; version 1
queues it, as VMAPI does."""

from __future__ import annotations

import pytest

from domain.states import Action
from domain.vm import Vm, make_cause
from service.commands.versioning import NEWEST
from service.jobs.worker import utcnow
from tests.api.helpers import (
    V1,
    V2,
    act,
    assert_error,
    create_vm,
    event_types_after,
    get_vm,
    history_types,
    wait_job,
)
from tests.api.test_networks import in_use, make_network

ON_A_SERVER = ["start", "stop", "kill", "reboot"]


def _vm_with_a_nic(paused, *, provisioned: bool = True) -> tuple[str, dict, dict]:
    """A VM with one NIC on a new network (running, or still provisioning): its uuid, the
    network, and the body of each action that could only fail behind a destroy."""
    network = make_network(paused.http)
    created = create_vm(paused.http, networks=[network["uuid"]])
    if provisioned:
        paused.run_jobs()
    vm_uuid = created["vm_uuid"]
    mac = get_vm(paused.http, vm_uuid)["nics"][0]["mac"]
    bodies = {**dict.fromkeys(ON_A_SERVER), "update": {"alias": "renamed"},
              "add_nics": {"networks": [network["uuid"]]}, "remove_nics": {"macs": [mac]}}
    return vm_uuid, network, bodies


def _refused_behind(response, action: str, destroy: str, execution: str, state: str) -> None:
    body = assert_error(response, 409, "VmBeingDestroyed")
    assert body["message"] == (
        f"Cannot {action} a VM being destroyed: its destroy job {destroy} is {execution}")
    assert body["destroy_job_uuid"] == destroy
    # what version 2 takes now: the DELETE (its repeat answers the destroy job), the
    # quarantine (an operator's, at once)
    assert (body["state"], body["allowed_actions"]) == (state, ["destroy", "quarantine"])


@pytest.mark.parametrize("deleted_by", [V1, V2], ids=["v1-delete", "v2-delete"])
def test_v2_refuses_every_action_behind_a_queued_destroy_and_changes_nothing(
        paused, services, deleted_by) -> None:
    http = paused.http
    vm_uuid, network, bodies = _vm_with_a_nic(paused)
    destroy = http.delete(f"/vms/{vm_uuid}", headers=deleted_by).json()["job_uuid"]
    head, addresses = services.commands.head_position(), in_use(http, network)
    for action, body in bodies.items():
        _refused_behind(act(http, vm_uuid, action, headers=V2, json=body), action, destroy,
                        "queued", "running")
    assert services.commands.head_position() == head  # nothing appended
    assert in_use(http, network) == addresses  # the add_nics claimed no address
    # the DELETE repeated still answers its job
    assert http.delete(f"/vms/{vm_uuid}", headers=deleted_by).json()["job_uuid"] == destroy
    assert get_vm(http, vm_uuid)["queued_job_uuids"] == [destroy]
    paused.run_jobs()
    assert wait_job(http, destroy)["execution"] == "succeeded"
    assert get_vm(http, vm_uuid)["state"] == "destroyed"


def test_v1_queues_every_action_behind_a_destroy_as_vmapi_does(paused, services) -> None:
    http = paused.http
    vm_uuid, network, bodies = _vm_with_a_nic(paused)
    destroy = http.delete(f"/vms/{vm_uuid}", headers=V2).json()["job_uuid"]
    queued = {}
    for action, body in bodies.items():
        response = act(http, vm_uuid, action, headers=V1, json=body)
        assert response.status_code == 202, response.text
        queued[action] = response.json()["job_uuid"]
    assert get_vm(http, vm_uuid)["queued_job_uuids"] == [destroy, *queued.values()]
    paused.run_jobs()
    assert wait_job(http, destroy)["execution"] == "succeeded"
    for action, job_uuid in queued.items():
        job = wait_job(http, job_uuid)
        assert job["execution"] == "failed", (action, job)
        assert job["error"].endswith("a VM in state 'destroyed'"), (action, job)
    assert in_use(http, network) == 0  # the failed add_nics gave its address back too


def test_v2_actions_after_a_delete_that_canceled_the_provision_are_refused(
        paused, services) -> None:
    """The race a tester named: a v2 DELETE of a VM still provisioning cancels the queued
    provision and every job behind it (`JobCanceled`), and queues its destroy. An action
    landing after that was queued behind the destroy (the VM still `provisioning`, where
    version 2 queues actions behind the provision) and failed there."""
    http = paused.http
    vm_uuid, network, bodies = _vm_with_a_nic(paused, provisioned=False)
    head = services.commands.head_position()
    destroy = http.delete(f"/vms/{vm_uuid}", headers=V2).json()["job_uuid"]
    assert event_types_after(services, head) == ["JobCanceled", "JobQueued"]
    head = services.commands.head_position()
    for action, body in bodies.items():
        _refused_behind(act(http, vm_uuid, action, headers=V2, json=body), action, destroy,
                        "queued", "provisioning")
        # version 1 as before: VMAPI's refusal of an action on a VM not provisioned yet
        assert_error(act(http, vm_uuid, action, headers=V1, json=body), 409, "UnallocatedVM")
    assert services.commands.head_position() == head
    paused.run_jobs()
    assert wait_job(http, destroy)["execution"] == "succeeded"
    assert get_vm(http, vm_uuid)["state"] == "destroyed"
    assert in_use(http, network) == 0
    assert history_types(http, vm_uuid)[-4:] == [
        "JobStarted", "JobStepRecorded", "Destroyed", "JobSucceeded"]


def test_an_action_racing_a_v2_delete_is_decided_again_and_refused(
        paused, services, monkeypatch) -> None:
    """A start whose save meets a DELETE that was saved first (another request's, between
    the start's read of the VM and its append): the change loop reads the VM again and
    decides again, so the start is refused rather than queued behind the destroy."""
    http = paused.http
    vm_uuid = create_vm(http)["vm_uuid"]
    paused.run_jobs()
    save, deleted, saves = services.commands.committer.save, [], []

    def delete_first(*aggregates, **kwargs):
        saves.append(1)
        if len(saves) == 1:  # the start's first save; the DELETE's own comes back here
            deleted.append(services.commands.request_action(
                vm_uuid, Action.DESTROY, behaviour=NEWEST, cause=make_cause("other")).job_uuid)
        return save(*aggregates, **kwargs)

    monkeypatch.setattr(services.commands.committer, "save", delete_first)
    response = act(http, vm_uuid, "start", headers=V2)
    # the start, decided on the VM with no destroy, reached its save; the DELETE's was
    # first, and the start decided again made none
    assert deleted and len(saves) == 2
    _refused_behind(response, "start", deleted[0], "queued", "running")
    assert get_vm(http, vm_uuid)["queued_job_uuids"] == deleted


def test_a_running_destroy_refuses_v2_actions(paused, services) -> None:
    http = paused.http
    vm_uuid = create_vm(http)["vm_uuid"]
    paused.run_jobs()
    destroy = http.delete(f"/vms/{vm_uuid}", headers=V2).json()["job_uuid"]
    now = utcnow()  # a worker claims the destroy (and is still in its call)
    services.commands.change(Vm, vm_uuid, lambda vm: vm.start_job(
        destroy, worker="busy-worker", now=now, lease_expires_at=now + services.worker.lease,
        cause=make_cause("worker:busy-worker")))
    head = services.commands.head_position()
    for action in ("stop", "update"):
        body = {"alias": "renamed"} if action == "update" else None
        _refused_behind(act(http, vm_uuid, action, headers=V2, json=body), action, destroy,
                        "running", "running")
    assert services.commands.head_position() == head


def test_once_the_destroy_failed_the_actions_are_taken_again(paused, services) -> None:
    """A destroy that fails leaves the VM as it was: nothing stands ahead of an action any
    more, so version 2 takes it (the refusal named the job to wait for)."""
    http = paused.http
    vm_uuid = create_vm(http)["vm_uuid"]
    paused.run_jobs()
    destroy = http.delete(f"/vms/{vm_uuid}", headers=V2).json()["job_uuid"]
    assert act(http, vm_uuid, "stop", headers=V2).status_code == 409
    fault = {"operation": "unregister", "mode": "fail", "count": 100}
    assert http.post("/sim/faults", json=fault).status_code in (200, 201)
    paused.run_jobs()
    assert wait_job(http, destroy)["execution"] == "failed"
    assert http.delete("/sim/faults").status_code in (200, 204)
    stop = act(http, vm_uuid, "stop", headers=V2)
    assert stop.status_code == 202, stop.text
    paused.run_jobs()
    assert wait_job(http, stop.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(http, vm_uuid)["state"] == "stopped"
