"""A bad body field is refused in VMAPI's words where docs/vmapi-compatibility.md promises them
("VMAPI's error texts", from sdc-vmapi ``lib/common/validation.js``), as the same value in
the query is: an unknown field is ``Invalid parameter``, a bad alias VMAPI's regexp text, not
pydantic's "Extra inputs are not permitted" and "String should match pattern"."""

from __future__ import annotations

import pytest

from tests.api.helpers import V2, assert_error, create_running_vm, get_vm, vm_body, wait_job

ALIAS_TEXT = r"String does not match regexp: /^[a-zA-Z0-9][a-zA-Z0-9\_\.\-]*$/"


def _refused(response, field: str, message: str, top: str, status: int = 409) -> None:
    body = assert_error(response, status, "ValidationFailed")
    assert (body["message"], body["errors"]) == (
        top, [{"field": field, "code": "Invalid", "message": message}]), body


@pytest.mark.parametrize("alias", ["bad alias", "-x", "", "web0\n", "é"])
def test_a_bad_alias_is_refused_with_vmapis_regexp_text(client, alias) -> None:
    _refused(client.post("/vms", json=vm_body(alias=alias)), "alias", ALIAS_TEXT,
             "Invalid VM parameters")
    vm_uuid = create_running_vm(client)
    _refused(client.post(f"/vms/{vm_uuid}", params={"action": "update"}, json={"alias": alias}),
             "alias", ALIAS_TEXT, "Invalid VM update parameters")
    # ListVms says it in the same words
    _refused(client.get("/vms", params={"alias": alias or "-"}), "alias", ALIAS_TEXT,
             "Invalid Parameters")


def test_an_alias_may_be_as_long_as_vmapis_create_validator_allows(client) -> None:
    longest = "a" * 189
    created = client.post("/vms", json=vm_body(alias=longest))
    assert created.status_code == 202, created.text
    assert get_vm(client, created.json()["vm_uuid"])["alias"] == longest
    _refused(client.post("/vms", json=vm_body(alias=longest + "a")), "alias",
             "String is longer than maximum of 189 characters", "Invalid VM parameters")
    _refused(client.post("/vms", json=vm_body(alias=5)), "alias", "Not a valid string",
             "Invalid VM parameters")


def test_an_update_may_set_the_longest_alias(client) -> None:
    vm_uuid = create_running_vm(client)
    response = client.post(f"/vms/{vm_uuid}", params={"action": "update"},
                           json={"alias": "b" * 189})
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["alias"] == "b" * 189


def test_an_unknown_body_field_is_invalid_parameter_as_an_unknown_query_parameter(client) -> None:
    _refused(client.post("/vms", json=vm_body(quota=10)), "quota", "Invalid parameter",
             "Invalid VM parameters")
    _refused(client.post("/vms", json=vm_body(quota=10), headers=V2), "quota",
             "Invalid parameter", "Invalid VM parameters", 422)
    vm_uuid = create_running_vm(client)
    _refused(client.post(f"/vms/{vm_uuid}", params={"action": "update"},
                         json={"alias": "x", "colour": "blue"}),
             "colour", "Invalid parameter", "Invalid VM update parameters")
    _refused(client.post(f"/vms/{vm_uuid}", params={"action": "stop"}, json={"colour": "b"}),
             "colour", "Invalid parameter", "Invalid Parameters")
    _refused(client.post("/servers", json={"hostname": "cn1", "ram_mib": 1024, "cpus": 8,
                                           "colour": "b"}),
             "colour", "Invalid parameter", "Invalid Parameters")
