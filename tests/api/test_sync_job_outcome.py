"""``sync=true`` answers a job that ended badly as VMAPI's ``waitForJob`` does: with an error,
not ``202`` (api.md, "Commands"; VMAPI's ``handleUpdateVMResponse`` and ``pollJob``'s
``_getErrorFromJob``). Found by a tester: a failed provision and a failed stop both answered
``202 {vm_uuid, job_uuid}``, so a sync client took them for done."""

from __future__ import annotations

import threading

import pytest

from service.api.job_messages import job_ended_message
from tests.api.helpers import (
    V1,
    V2,
    act,
    assert_error,
    create_running_vm,
    create_vm,
    get_vm,
    vm_body,
)
from tests.waiting import wait_until


def assert_job_error(response, code: str, services) -> dict:
    """A 409 ``code`` naming the VM and its job, whose message is VMAPI's for that job."""
    body = assert_error(response, 409, code)
    job = services.jobs.get(body["job_uuid"])
    assert job["vm_uuid"] == body["vm_uuid"], body
    assert job["execution"] == ("failed" if code == "JobFailed" else "canceled"), job
    last = job["chain_results"][-1]
    assert body["message"] == (f"job {job['name']} ({job['uuid']}) failed: "
                               f"{last['name']}: {last['error']}"), body
    assert response.headers["workflow-api"]
    return body


@pytest.mark.parametrize("headers", [V1, V2])
def test_a_sync_create_whose_provision_failed_is_409_job_failed(client, services,
                                                                headers) -> None:
    response = client.post("/vms", params={"sync": "true"}, headers=headers, json=vm_body(
        internal_metadata={"force_provision_failure": True}))
    body = assert_job_error(response, "JobFailed", services)
    assert get_vm(client, body["vm_uuid"])["state"] == "failed"


def test_a_sync_stop_of_a_stopped_vm_that_fails_is_409_job_failed(client, services) -> None:
    vm_uuid = create_running_vm(client)
    assert act(client, vm_uuid, "stop", sync="true").status_code == 202
    for response in (act(client, vm_uuid, "stop", sync="true", headers=V1),
                     act(client, vm_uuid, "stop", json={"sync": True}, headers=V1)):
        body = assert_job_error(response, "JobFailed", services)
        assert body["vm_uuid"] == vm_uuid
        assert body["message"].endswith("Cannot stop a VM from a 'stopped' state"), body


@pytest.mark.parametrize("headers", [V1, V2])
def test_a_sync_delete_whose_destroy_failed_is_409_job_failed(client, services,
                                                              headers) -> None:
    vm_uuid = create_running_vm(client)
    injected = client.post("/sim/faults", json={"operation": "unregister", "count": 50})
    assert injected.status_code == 200, injected.text
    response = client.delete(f"/vms/{vm_uuid}", params={"sync": "true"}, headers=headers)
    assert_job_error(response, "JobFailed", services)


def test_a_sync_action_whose_job_was_canceled_is_409_job_canceled(paused, services) -> None:
    http = paused.http
    created = create_vm(http)  # its provision stays queued: the worker is paused
    vm_uuid = created["vm_uuid"]
    answers: list = []
    waiting = threading.Thread(target=lambda: answers.append(
        act(http, vm_uuid, "stop", headers=V2, sync="true")))
    waiting.start()
    wait_until(lambda: len(get_vm(http, vm_uuid)["queued_job_uuids"]) >= 2,
               "the sync stop to be queued", timeout=10)
    # a v2 DELETE of a VM whose provision has not started cancels it and the stop behind it
    assert http.delete(f"/vms/{vm_uuid}", headers=V2).status_code == 202
    waiting.join(timeout=30)
    assert answers, "the sync stop did not answer"
    body = assert_job_error(answers[0], "JobCanceled", services)
    assert body["message"].endswith("canceled by a DeleteVm"), body


def test_a_sync_command_whose_job_succeeded_is_still_202(client, services) -> None:
    response = client.post("/vms", params={"sync": "true"}, json=vm_body())
    assert response.status_code == 202, response.text
    assert set(response.json()) == {"vm_uuid", "job_uuid"}


@pytest.mark.parametrize(("job", "message"), [
    ({"execution": "failed", "chain_results": [{"name": "place", "error": "no room"}]},
     "job provision (J) failed: place: no room"),
    ({"execution": "failed", "chain_results": [{"name": "place", "error": {"message": "m"}}]},
     "m"),
    ({"execution": "failed", "chain_results": [{"name": "place", "error": None}]},
     "Job provision (J) failed"),
    ({"execution": "canceled", "chain_results": []}, "Job provision (J) was canceled"),
    ({"execution": "canceled", "chain_results": [{"name": "cancel", "error": "by X"}]},
     "job provision (J) failed: cancel: by X"),
])
def test_the_message_of_a_job_that_ended_badly_is_vmapis(job, message) -> None:
    """VMAPI's ``_getErrorFromJob``: the last chain result's error (its ``message`` when it
    has one), else the execution alone."""
    assert job_ended_message({"uuid": "J", "name": "provision", **job}) == message
