"""A VM's history: ``GET /vms/{uuid}/history`` (api.md, "Endpoints"; design.md, "Auditing")."""

from __future__ import annotations

import itertools
import uuid

from tests.api.helpers import (
    OTHER_OWNER,
    V2,
    act_and_wait,
    assert_error,
    create_running_vm,
    error_fields,
)

# the last two are the inputs of the event's hash-chain link (tests/api/test_history_chain.py)
EVENT_FIELDS = {"version", "position", "timestamp", "type", "data", "cause", "topic", "chained"}


def test_history_lists_every_event_with_version_position_timestamp_type_data_and_cause(
        client, services) -> None:
    vm_uuid = create_running_vm(client, alias="audited")
    stop = act_and_wait(client, vm_uuid, "stop", headers={"x-request-id": "stop-req"})
    response = client.get(f"/vms/{vm_uuid}/history")
    assert response.status_code == 200
    history = response.json()
    assert all(set(event) == EVENT_FIELDS for event in history)
    assert [e["version"] for e in history] == list(range(1, services.commands.load(
        vm_uuid).version + 1))
    positions = [e["position"] for e in history]
    assert all(a < b for a, b in itertools.pairwise(positions))
    stamps = [e["timestamp"] for e in history]
    assert stamps == sorted(stamps) and all(s.endswith("Z") for s in stamps)
    assert history[0]["type"] == "Created"
    assert history[0]["data"]["alias"] == "audited"
    assert history[0]["cause"]["actor"] and history[0]["cause"]["job_uuid"] is None
    queued = [e for e in history if e["type"] == "JobQueued" and e["data"]["name"] == "stop"]
    assert queued[0]["cause"]["request_id"] == "stop-req"
    # every event the stop job's worker appended names the job in its cause
    by_job = [e for e in history if e["cause"]["job_uuid"] == stop["uuid"]]
    assert [e["type"] for e in by_job] == [
        "JobStarted", "JobStepRecorded", "NodeObserved", "Stopped", "JobSucceeded"]


def test_history_pages_with_after_version_and_limit(client) -> None:
    vm_uuid = create_running_vm(client)
    everything = client.get(f"/vms/{vm_uuid}/history").json()
    walked, after = [], 0
    while True:
        page = client.get(f"/vms/{vm_uuid}/history",
                          params={"after_version": after, "limit": 3}).json()
        assert len(page) <= 3
        if not page:
            break
        walked += page
        after = page[-1]["version"]
    assert walked == everything
    assert client.get(f"/vms/{vm_uuid}/history",
                      params={"after_version": len(everything) + 5}).json() == []


def test_history_of_an_unknown_or_another_owners_vm_is_404(client) -> None:
    vm_uuid = create_running_vm(client)
    assert_error(client.get(f"/vms/{uuid.uuid4()}/history"), 404, "ResourceNotFound")
    assert_error(client.get(f"/vms/{vm_uuid}/history", params={"owner_uuid": OTHER_OWNER}),
                 404, "ResourceNotFound")


def test_history_refuses_bad_parameters_naming_each(client) -> None:
    vm_uuid = create_running_vm(client)
    for params, field in (({"after_version": "-1"}, "after_version"), ({"limit": "0"}, "limit"),
                          ({"limit": "1001"}, "limit"), ({"colour": "blue"}, "colour")):
        body = assert_error(client.get(f"/vms/{vm_uuid}/history", params=params, headers=V2),
                            422, "ValidationFailed")
        assert error_fields(body) == {field: "Invalid"}, params


def test_a_vm_argument_that_is_not_a_uuid_is_said_to_be_one(client) -> None:
    """``notauuid`` was "VM notauuid not found", as if a VM could have that uuid: the answer
    says it is not a uuid (VMAPI's ``Invalid UUID``), as GetVm and the history alike do."""
    for path in ("/vms/notauuid", "/vms/notauuid/history", "/vms/notauuid?version=2"):
        body = assert_error(client.get(path), 404, "ResourceNotFound")
        assert body["message"] == "VM not found (Invalid UUID: not a uuid)", path


def test_the_history_command_refuses_an_argument_that_is_not_a_uuid_as_a_usage_error(
        services, settings) -> None:
    """It ended with status 1 and "VM notauuid not found", as if the VM were missing, where
    ``changes --vm-uuid bad`` and ``rebuild nosuch`` end as usage errors, status 2 (a
    tester); a well-formed uuid no VM has is still "not found", status 1."""
    from tests.cli import vmledger

    ended = vmledger("history", "notauuid", database_url=settings.database_url)
    assert ended.returncode == 2, ended.stderr
    assert "Invalid value for VM_UUID: not a uuid: 'notauuid'" in ended.stderr, ended.stderr
    assert "not found" not in ended.stderr
    nobody = "4dd33ca6-0000-4000-8000-000000000000"
    ended = vmledger("history", nobody, database_url=settings.database_url)
    assert (ended.returncode, ended.stderr.strip()) == (
        1, f"vmledger history: VM {nobody} not found"), ended.stderr
