"""CreateVm with a client-chosen ``uuid`` that a VM already has (api.md, "Idempotency"): the
same request is answered the first create's result while that VM is not destroyed (a retry
of a lost answer); every refusal has VMAPI's shape for a duplicate uuid (``validateUniqueUuid``:
``ValidationFailed``, "Invalid VM parameters", ``errors: [{field: "uuid", code: "Duplicate",
message: "Already exists"}]``), whatever the reason, so none tells more than another."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import (
    OTHER_OWNER,
    V2,
    act_and_wait,
    assert_error,
    create_running_vm,
    create_vm,
    get_vm,
    vm_body,
    wait_job,
)

DUPLICATE = [{"field": "uuid", "code": "Duplicate", "message": "Already exists"}]


def assert_duplicate(response, status: int = 409) -> None:
    body = assert_error(response, status, "ValidationFailed")
    assert (body["message"], body["errors"]) == ("Invalid VM parameters", DUPLICATE), body


@pytest.mark.parametrize(("headers", "status"), [({}, 409), (V2, 422)])
def test_a_create_repeating_a_destroyed_vms_uuid_is_a_duplicate(client, services, headers,
                                                                 status) -> None:
    """Found by a tester: the same create after the VM was destroyed answered 202 with the
    old provision job, which had succeeded, so a ``createVmAndWait`` took the destroyed VM
    for a new one running."""
    chosen = str(uuid.uuid4())
    vm_uuid = create_running_vm(client, uuid=chosen)
    assert act_and_wait(client, vm_uuid, "stop")["execution"] == "succeeded"
    deleted = client.delete(f"/vms/{vm_uuid}")
    assert wait_job(client, deleted.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["state"] == "destroyed"
    head = services.commands.head_position()
    assert_duplicate(client.post("/vms", json=vm_body(uuid=chosen), headers=headers), status)
    assert services.commands.head_position() == head


def test_a_create_repeating_a_failed_vms_uuid_answers_its_failed_provision(client) -> None:
    """A failed VM is kept idempotent: the answer's job is the provision that failed, which
    is what the client must learn of its create (docs/vmapi-compatibility.md)."""
    chosen = str(uuid.uuid4())
    body = vm_body(uuid=chosen, internal_metadata={"force_provision_failure": True})
    first = create_vm(client, uuid=chosen, internal_metadata=body["internal_metadata"])
    assert wait_job(client, first["job_uuid"])["execution"] == "failed"
    again = client.post("/vms", json=body)
    assert again.status_code == 202, again.text
    assert again.json() == first


def test_every_refusal_of_a_taken_vm_uuid_has_vmapis_duplicate_shape(client) -> None:
    """A different spec answered "VM … already exists with different parameters" where
    another owner's uuid answered "Invalid VM parameters": one shape for both, VMAPI's."""
    chosen = str(uuid.uuid4())
    create_running_vm(client, uuid=chosen, alias="first")
    assert_duplicate(client.post("/vms", json=vm_body(uuid=chosen, alias="second")))
    assert_duplicate(client.post("/vms", json=vm_body(uuid=chosen, owner_uuid=OTHER_OWNER)))
    network = client.post("/networks", json={
        "name": "n", "subnet": "10.9.0.0/24", "provision_start_ip": "10.9.0.10",
        "provision_end_ip": "10.9.0.20"}).json()["uuid"]
    assert_duplicate(client.post("/vms", json=vm_body(uuid=network)))
