"""DeleteVm, one test per row of api.md's "DeleteVm and actions: version 1 vs version 2" table
that the service implements (the row "quarantined" is not yet)."""

from __future__ import annotations

import pytest

from domain.vm import make_cause
from tests.api.helpers import (
    V2,
    act,
    assert_error,
    create_running_vm,
    create_vm,
    event_types_after,
    get_vm,
    history_types,
    sim_row,
    wait_job,
)


def test_delete_of_a_vm_with_a_server_queues_a_destroy_job_that_unregisters_it(
        client, services) -> None:
    for headers in ({}, V2):
        vm_uuid = create_running_vm(client)
        assert sim_row(services, vm_uuid) is not None
        before = get_vm(client, vm_uuid)["version"]
        response = client.delete(f"/vms/{vm_uuid}", headers=headers)
        assert response.status_code == 202, response.text
        assert response.json()["vm_uuid"] == vm_uuid
        assert response.headers["Location"] == f"/vms/{vm_uuid}"
        job = wait_job(client, response.json()["job_uuid"])
        assert (job["name"], job["execution"]) == ("destroy", "succeeded")
        assert [step["name"] for step in job["chain_results"]] == ["unregister"]
        vm = get_vm(client, vm_uuid)
        assert (vm["state"], vm["desired_state"]) == ("destroyed", "destroyed")
        assert vm["destroyed"] is not None
        assert sim_row(services, vm_uuid) is None
        assert history_types(client, vm_uuid)[before:] == [
            "JobQueued", "JobStarted", "JobStepRecorded", "CapacityReleased", "Destroyed",
            "JobSucceeded"]


def test_v1_delete_of_a_vm_with_no_server_is_409_and_appends_nothing(paused, services) -> None:
    created = create_vm(paused.http)
    head = services.commands.head_position()
    body = assert_error(paused.http.delete(f"/vms/{created['vm_uuid']}"), 409, "UnallocatedVM")
    assert body["message"] == "Cannot delete a VM with no server_uuid"
    assert services.commands.head_position() == head
    paused.run_jobs()
    assert get_vm(paused.http, created["vm_uuid"])["state"] == "running"


def test_v2_delete_of_a_provisioning_vm_cancels_the_queued_provision_and_touches_no_server(
        paused, services) -> None:
    http = paused.http
    created = create_vm(http)
    head = services.commands.head_position()
    response = http.delete(f"/vms/{created['vm_uuid']}", headers=V2)
    assert response.status_code == 202, response.text
    destroy_uuid = response.json()["job_uuid"]
    assert event_types_after(services, head) == ["JobCanceled", "JobQueued"]
    assert get_vm(http, created["vm_uuid"])["queued_job_uuids"] == [destroy_uuid]
    paused.run_jobs()
    provision = wait_job(http, created["job_uuid"])
    assert provision["execution"] == "canceled"
    assert provision["chain_results"][-1]["error"]
    destroy = wait_job(http, destroy_uuid)
    assert destroy["execution"] == "succeeded"
    assert [step["name"] for step in destroy["chain_results"]] == ["mark_destroyed"]
    vm = get_vm(http, created["vm_uuid"])
    assert (vm["state"], vm["server_uuid"]) == ("destroyed", None)
    assert sim_row(services, created["vm_uuid"]) is None
    assert "Provisioned" not in history_types(http, created["vm_uuid"])


def test_v2_delete_that_cancels_the_queued_provision_cancels_the_jobs_queued_behind_it(
        client, services) -> None:
    # the operator tester's case: a stop queued behind the provision could never succeed
    # once the DELETE canceled the provision (it ran, and failed "Cannot stop a VM in state
    # 'provisioning'", before the destroy); it ends canceled with the provision instead
    assert client.post("/sim/workers", params={"action": "pause"}).json()["workers_paused"]
    created = create_vm(client)
    vm_uuid = created["vm_uuid"]
    behind = [act(client, vm_uuid, "stop", headers=V2),
              act(client, vm_uuid, "update", headers=V2, json={"alias": "renamed"})]
    assert [r.status_code for r in behind] == [202, 202], behind[-1].text
    head = services.commands.head_position()
    response = client.delete(f"/vms/{vm_uuid}", headers=V2)
    assert response.status_code == 202, response.text
    destroy_uuid = response.json()["job_uuid"]
    # the stop's ask withdrawn with it (docs/jobs.md, "The desired state"), then the destroy's
    assert event_types_after(services, head) == [
        "JobCanceled", "JobCanceled", "DesiredStateSet", "JobCanceled", "JobQueued"]
    assert get_vm(client, vm_uuid)["desired_state"] == "destroyed"
    assert get_vm(client, vm_uuid)["queued_job_uuids"] == [destroy_uuid]
    assert client.post("/sim/workers", params={"action": "resume"}).status_code == 200
    for job_uuid in [created["job_uuid"], *(r.json()["job_uuid"] for r in behind)]:
        canceled = wait_job(client, job_uuid)
        assert (canceled["execution"], canceled["error"]) == (
            "canceled", "canceled by a DeleteVm"), canceled
    destroy = wait_job(client, destroy_uuid)
    assert destroy["execution"] == "succeeded", destroy
    assert [step["name"] for step in destroy["chain_results"]] == ["mark_destroyed"]
    assert get_vm(client, vm_uuid)["state"] == "destroyed"
    assert "Stopped" not in history_types(client, vm_uuid)


def test_v1_delete_of_a_destroyed_vm_queues_a_job_that_succeeds_doing_nothing(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    wait_job(client, client.delete(f"/vms/{vm_uuid}").json()["job_uuid"])
    destroyed = get_vm(client, vm_uuid)
    response = client.delete(f"/vms/{vm_uuid}")
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_uuid"])
    assert (job["name"], job["execution"]) == ("destroy", "succeeded")
    assert len(job["chain_results"]) == 1 and not job["chain_results"][0]["error"]
    vm = get_vm(client, vm_uuid)
    assert (vm["state"], vm["destroyed"]) == ("destroyed", destroyed["destroyed"])
    assert "Destroyed" not in history_types(client, vm_uuid)[destroyed["version"]:]


def test_v2_delete_of_a_destroyed_vm_is_409_vm_already_destroyed_and_appends_nothing(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    wait_job(client, client.delete(f"/vms/{vm_uuid}").json()["job_uuid"])
    head = services.commands.head_position()
    assert_error(client.delete(f"/vms/{vm_uuid}", headers=V2), 409, "VmAlreadyDestroyed")
    assert services.commands.head_position() == head


def test_v2_delete_of_a_destroyed_vm_is_409_even_with_a_v1_delete_queued(paused, services) -> None:
    """A repeat is one only where the request would be admitted: the VM is destroyed, which
    version 2 refuses, whatever job a version 1 DELETE queued (api.md)."""
    http = paused.http
    created = create_vm(http)
    paused.run_jobs()
    vm_uuid = created["vm_uuid"]
    first = http.delete(f"/vms/{vm_uuid}")
    paused.run_jobs()
    assert wait_job(http, first.json()["job_uuid"])["execution"] == "succeeded"
    v1 = http.delete(f"/vms/{vm_uuid}")  # queued, not run: a job that will do nothing
    assert v1.status_code == 202, v1.text
    head = services.commands.head_position()
    assert_error(http.delete(f"/vms/{vm_uuid}", headers=V2), 409, "VmAlreadyDestroyed")
    assert services.commands.head_position() == head
    # a version 1 repeat is still that job
    assert http.delete(f"/vms/{vm_uuid}").json()["job_uuid"] == v1.json()["job_uuid"]
    paused.run_jobs()
    assert wait_job(http, v1.json()["job_uuid"])["execution"] == "succeeded"


@pytest.mark.parametrize("headers", [{}, V2], ids=["v1", "v2"])
def test_delete_of_a_vm_whose_provision_failed_destroys_it(client, services, headers) -> None:
    created = create_vm(client, internal_metadata={"force_provision_failure": True})
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    response = client.delete(f"/vms/{created['vm_uuid']}", headers=headers)
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, created["vm_uuid"])["state"] == "destroyed"
    assert sim_row(services, created["vm_uuid"]) is None


def test_delete_of_a_failed_vm_on_a_server_cleans_the_server_then_destroys_it(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    # the guest crashed: a fact an agent reports (no HTTP route for it yet)
    services.commands.record_failure(vm_uuid, "crashed", "guest panic",
                                     cause=make_cause("agent"))
    failed = get_vm(client, vm_uuid)
    assert failed["state"] == "failed" and failed["server_uuid"] is not None
    assert sim_row(services, vm_uuid) is not None
    response = client.delete(f"/vms/{vm_uuid}")
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_uuid"])
    assert job["execution"] == "succeeded"
    assert [step["name"] for step in job["chain_results"]] == ["unregister"]
    assert get_vm(client, vm_uuid)["state"] == "destroyed"
    assert sim_row(services, vm_uuid) is None


# A server is removed when its compute node reports it gone (the simulator's route) or when
# an operator records its removal in the log (the API's route): DeleteVm treats both alike.
REMOVALS = {"reported by the fleet": "/sim/servers/{}", "recorded by an operator": "/servers/{}"}


def _remove_server_of(client, vm_uuid: str, route: str) -> str:
    server_uuid = get_vm(client, vm_uuid)["server_uuid"]
    removed = client.post(route.format(server_uuid), params={"action": "remove"})
    assert removed.status_code == 200, removed.text
    return server_uuid


@pytest.mark.parametrize("route", REMOVALS.values(), ids=REMOVALS.keys())
def test_v1_delete_of_a_vm_whose_server_was_removed_queues_a_job_that_fails(
        client, services, route) -> None:
    vm_uuid = create_running_vm(client)
    _remove_server_of(client, vm_uuid, route)
    response = client.delete(f"/vms/{vm_uuid}")
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_uuid"])
    assert (job["name"], job["execution"]) == ("destroy", "failed")
    assert "removed" in job["chain_results"][-1]["error"]
    assert get_vm(client, vm_uuid)["state"] == "running"


@pytest.mark.parametrize("route", REMOVALS.values(), ids=REMOVALS.keys())
def test_v2_delete_of_a_vm_whose_server_was_removed_destroys_it_at_once_with_no_job(
        client, services, route) -> None:
    vm_uuid = create_running_vm(client)
    _remove_server_of(client, vm_uuid, route)
    etag = client.get(f"/vms/{vm_uuid}").headers["etag"]
    head = services.commands.head_position()
    stale = client.delete(f"/vms/{vm_uuid}", headers={**V2, "If-Match": '"1"'})
    assert_error(stale, 412, "PreconditionFailed")
    assert services.commands.head_position() == head
    response = client.delete(f"/vms/{vm_uuid}", headers={**V2, "If-Match": etag})
    assert response.status_code == 204, response.text
    assert response.content == b""
    # the VM gives back its capacity, the server records the release, in one transaction
    assert event_types_after(services, head) == [
        "CapacityReleased", "Destroyed", "ClaimReleased"]
    vm = get_vm(client, vm_uuid)
    assert vm["state"] == "destroyed"
    assert response.headers["etag"] == f'"{vm["version"]}"'
    assert [j["name"] for j in client.get(f"/vms/{vm_uuid}/jobs").json()] == ["provision"]


@pytest.mark.parametrize("route", REMOVALS.values(), ids=REMOVALS.keys())
def test_a_v2_delete_repeated_after_the_server_was_removed_destroys_it_at_once(
        paused, services, route) -> None:
    """The first v2 DELETE queued a destroy job; the server is removed before it runs, so
    the job would fail there. A repeat is admitted as it would be now (api.md): destroyed at
    once, the queued job ended, as a first DELETE after the removal does."""
    http = paused.http
    created = create_vm(http)
    paused.run_jobs()
    vm_uuid = created["vm_uuid"]
    first = http.delete(f"/vms/{vm_uuid}", headers=V2)
    assert first.status_code == 202, first.text
    _remove_server_of(http, vm_uuid, route)
    again = http.delete(f"/vms/{vm_uuid}", headers=V2)
    assert again.status_code == 204, again.text
    assert get_vm(http, vm_uuid)["state"] == "destroyed"
    job = http.get(f"/jobs/{first.json()['job_uuid']}").json()
    assert job["execution"] == "canceled"


@pytest.mark.parametrize(("first", "second"), [({}, V2), (V2, {})], ids=["v1-then-v2", "v2-then-v1"])
def test_a_delete_of_the_other_version_behind_a_queued_destroy_queues_its_own_that_does_nothing(
        paused, first, second) -> None:
    """A DELETE repeats the queued destroy only if it would record exactly its params; one of
    the other version queues a destroy of its own, which finds the VM destroyed and succeeds
    doing nothing (api.md's DeleteVm table, "while the VM's destroy job is queued")."""
    http = paused.http
    vm_uuid = create_vm(http)["vm_uuid"]
    paused.run_jobs()
    destroy = http.delete(f"/vms/{vm_uuid}", headers=first).json()["job_uuid"]
    assert http.delete(f"/vms/{vm_uuid}", headers=first).json()["job_uuid"] == destroy
    other = http.delete(f"/vms/{vm_uuid}", headers=second)
    assert other.status_code == 202 and other.json()["job_uuid"] != destroy
    paused.run_jobs()
    assert wait_job(http, destroy)["execution"] == "succeeded"
    job = wait_job(http, other.json()["job_uuid"])
    assert job["execution"] == "succeeded"
    assert job["chain_results"][-1]["result"] == "already destroyed: nothing to do"
    assert history_types(http, vm_uuid).count("Destroyed") == 1
