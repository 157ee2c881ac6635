"""The top-level message of each refusal on VMAPI's routes is VMAPI's, word for word
(docs/vmapi-compatibility.md, "VMAPI's error texts"). Found by a tester: ``POST
/vms/$V?action=stop&owner_uuid=bad`` said ``Invalid parameters`` where VMAPI says ``Invalid
Parameters`` (sdc-vmapi lib/interceptors.js' loadVm, lib/endpoints/vms.js), and a missing VM
was ``VM <uuid> not found`` where VMAPI's loadVm says ``VM not found``."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import V2, assert_error, create_running_vm

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

UNKNOWN = str(uuid.uuid4())


def _message(response, status: int, code: str) -> str:
    return assert_error(response, status, code)["message"]


def test_bad_parameters_on_a_vms_routes_are_vmapis_invalid_parameters(client) -> None:
    vm = create_running_vm(client)
    for method, url, body in (
        ("POST", f"/vms/{vm}?action=stop&owner_uuid=bad", None),
        ("POST", f"/vms/{vm}?action=stop&idempotent=maybe", None),
        ("POST", f"/vms/{vm}?action=stop&sync=maybe", None),
        ("POST", f"/vms/{vm}?action=frobnicate", None),
        ("POST", f"/vms/{vm}", None),
        ("POST", f"/vms/{vm}?action=kill&signal=HUP", None),
        ("POST", f"/vms/{vm}?action=update&owner_uuid=bad", {"alias": "web"}),
        ("POST", f"/vms/{vm}?action=add_nics&owner_uuid=bad", {"networks": []}),
        ("DELETE", f"/vms/{vm}?owner_uuid=bad", None),
        ("DELETE", f"/vms/{vm}?sync=maybe", None),
        ("GET", f"/vms/{vm}?owner_uuid=bad", None),
        ("GET", f"/vms/{vm}/jobs?owner_uuid=bad", None),
        ("PUT", "/vms", {}),
        ("GET", "/vms?owner_uuid=bad", None),
    ):
        response = client.request(method, url, json=body)
        assert _message(response, 409, "ValidationFailed") == "Invalid Parameters", (method, url)
    # version 2 says the same, with its status
    response = client.post(f"/vms/{vm}?action=stop&owner_uuid=bad", headers=V2)
    assert _message(response, 422, "ValidationFailed") == "Invalid Parameters"


def test_a_nic_actions_body_has_vmapis_words_for_it(client) -> None:
    vm = create_running_vm(client)
    # VMAPI's validateNetworks and validateMacs (lib/common/validation.js)
    add = client.post(f"/vms/{vm}?action=add_nics", json={"networks": "not a list"})
    assert _message(add, 409, "ValidationFailed") == "Invalid network parameters"
    remove = client.post(f"/vms/{vm}?action=remove_nics", json={"macs": 5})
    assert _message(remove, 409, "ValidationFailed") == "Invalid VM update parameters"


def test_a_missing_vm_is_vmapis_vm_not_found(client) -> None:
    vm = create_running_vm(client)
    other_owner = str(uuid.uuid4())
    for method, url in (("GET", f"/vms/{UNKNOWN}"), ("POST", f"/vms/{UNKNOWN}?action=stop"),
                        ("DELETE", f"/vms/{UNKNOWN}"), ("GET", f"/vms/{UNKNOWN}/jobs"),
                        ("GET", f"/vms/{vm}?owner_uuid={other_owner}"),
                        ("POST", f"/vms/{vm}?action=stop&owner_uuid={other_owner}"),
                        ("DELETE", f"/vms/{vm}?owner_uuid={other_owner}")):
        response = client.request(method, url)
        assert _message(response, 404, "ResourceNotFound") == "VM not found", (method, url)


def test_a_missing_job_is_workflows_does_not_exist(client) -> None:
    # VMAPI's GetJob answers its Workflow API's refusal (node-workflow-moray-backend)
    for url in (f"/jobs/{UNKNOWN}", f"/jobs/{UNKNOWN}/wait"):
        assert _message(client.get(url), 404, "ResourceNotFound") == (
            f"Job with uuid '{UNKNOWN}' does not exist"), url
