"""``PUT /vms/{uuid}`` as Triton's vm-agent sends it: the whole VM object, no generation
(service/commands/vm_agent.py; sdc-vmapi ``vms.delete_non_existing_no_workflow``)."""

from __future__ import annotations

import uuid

from tests.api.helpers import (
    OWNER, V2, assert_error, create_running_vm, get_vm, history_types, wait_job,
)

T1, T2, T3 = "2026-01-01T00:00:01.000Z", "2026-01-01T00:00:02.000Z", "2026-01-01T00:00:03.000Z"


def put(client, vm_uuid: str, **fields):
    return client.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, **fields})


def test_a_vm_the_log_never_had_is_recorded_as_found_even_on_no_server(client) -> None:
    vm_uuid = str(uuid.uuid4())
    response = put(client, vm_uuid, alias="found", state="running", owner_uuid=OWNER,
                   max_physical_memory=512, zone_state="running", quota=10)
    assert response.status_code == 200, response.text
    vm = response.json()
    assert (vm["state"], vm["server_uuid"], vm["alias"], vm["ram"]) == (
        "running", None, "found", 512)
    assert vm["queued_job_uuids"] == [] and vm["active_job_uuid"] is None
    assert history_types(client, vm_uuid) == ["Discovered"]
    assert client.get("/vms", params={"alias": "found"}).json()[0]["uuid"] == vm_uuid


def test_version_1_refuses_to_delete_a_running_vm_on_no_server_and_changes_nothing(
        client) -> None:
    vm_uuid = str(uuid.uuid4())
    assert put(client, vm_uuid, state="running").status_code == 200
    body = assert_error(client.delete(f"/vms/{vm_uuid}"), 409, "UnallocatedVM")
    assert body["message"] == "Cannot delete a VM with no server_uuid"
    assert get_vm(client, vm_uuid)["state"] == "running"
    # version 2 destroys it: there is no compute node to call
    deleted = client.delete(f"/vms/{vm_uuid}", headers=V2)
    assert deleted.status_code == 202, deleted.text
    assert wait_job(client, deleted.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["state"] == "destroyed"


def test_reports_are_ordered_by_last_modified_so_a_stale_one_changes_nothing(client) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    stopped = put(client, vm_uuid, state="stopped", server_uuid=server, last_modified=T2)
    assert stopped.json()["state"] == "stopped"
    version = stopped.json()["version"]
    late = put(client, vm_uuid, state="running", server_uuid=server, last_modified=T1)
    assert late.status_code == 200
    assert (late.json()["state"], late.json()["version"]) == ("stopped", version)
    newer = put(client, vm_uuid, state="running", server_uuid=server, last_modified=T3)
    assert newer.json()["state"] == "running"


def test_a_destroyed_vm_is_never_brought_back(client) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    wait_job(client, client.delete(f"/vms/{vm_uuid}").json()["job_uuid"])
    again = put(client, vm_uuid, state="running", server_uuid=server, last_modified=T3)
    assert again.status_code == 200
    assert again.json()["state"] == "destroyed"


def test_a_report_from_another_server_does_not_move_the_vm(client) -> None:
    vm_uuid = create_running_vm(client)
    elsewhere = put(client, vm_uuid, state="stopped", server_uuid=str(uuid.uuid4()),
                    last_modified=T2)
    assert elsewhere.json()["state"] == "running"


def test_an_unknown_vm_reported_gone_or_a_mismatched_uuid_is_refused(client) -> None:
    assert_error(put(client, str(uuid.uuid4()), state="destroyed"), 404, "ResourceNotFound")
    mismatch = client.put(f"/vms/{uuid.uuid4()}", json={"uuid": str(uuid.uuid4()),
                                                       "state": "running"})
    assert_error(mismatch, 409, "ValidationFailed")
    assert_error(put(client, str(uuid.uuid4()), state="running", alias="a\x00b"), 409,
                 "ValidationFailed")


def test_a_report_folds_the_vms_stream_once_for_its_check_and_its_change(
        client, services, monkeypatch) -> None:
    # The check that a reporter may name the VM is made on the aggregate the report's own
    # change loaded, not on a fold of its own
    vm_uuid = create_running_vm(client)
    vm = get_vm(client, vm_uuid)
    folds: list[str] = []  # the VM as the loader hands it out: a fold, or a cached save's copy
    load, cached = services.commands.load_aggregate, services.commands._cached_save

    def loaded(kind, uuid, version=None):
        if str(uuid) == vm_uuid:
            folds.append(vm_uuid)
        return load(kind, uuid, version)

    def copied(uuid):
        copy = cached(uuid)
        if copy is not None and str(uuid) == vm_uuid:
            folds.append(vm_uuid)
        return copy

    monkeypatch.setattr(services.commands, "load_aggregate", loaded)
    monkeypatch.setattr(services.commands, "_cached_save", copied)
    generational = client.put(f"/vms/{vm_uuid}", json={
        "state": "running", "server_uuid": vm["server_uuid"], "boot_id": "b1",
        "generation": 1})
    assert generational.status_code == 200, generational.text
    assert len(folds) == 1
    folds.clear()
    # vm-agent's form first asks whether the log has the VM (a VM it has not is made new)
    assert put(client, vm_uuid, state="running", server_uuid=vm["server_uuid"],
               last_modified=T1).status_code == 200
    assert len(folds) == 2


def test_a_generation_that_is_not_an_integer_is_refused_naming_it(client, services) -> None:
    # found by a new user: true was read as generation 1 (a 409 StaleGeneration)
    vm = get_vm(client, create_running_vm(client))
    head = services.commands.head_position()
    for generation in (True, "7", 7.5):
        refused = client.put(f"/vms/{vm['uuid']}", json={
            "state": "running", "server_uuid": vm["server_uuid"], "boot_id": "b1",
            "generation": generation})
        body = assert_error(refused, 409, "ValidationFailed")
        assert [e["field"] for e in body["errors"]] == ["generation"], body
        inventory = client.put(f"/vms?server_uuid={vm['server_uuid']}", json={
            "boot_id": "b1", "generation": generation, "vms": {}})
        assert_error(inventory, 409, "ValidationFailed")
    assert services.commands.head_position() == head
