"""A VM action's parameters in its JSON body: VMAPI reads the query and the body alike
(restify's mapParams; upstream vms.full.test.js POSTs ``{action: 'stop'}`` to /vms/:uuid), so
``action``, ``timeout``, ``origin`` and ``creator_uuid`` may be in either, as ``signal``,
``idempotent``, ``sync`` and ``owner_uuid`` already were. Given in both with different values,
they are refused (``ConflictingParameters``), never one silently winning (api.md, "Contract:
errors")."""

from __future__ import annotations

import pytest

from tests.api.helpers import (
    OWNER, V2, assert_error, create_running_vm, error_fields, get_vm, wait_job,
)


def _post(client, vm_uuid: str, body, headers=None, **params):
    return client.post(f"/vms/{vm_uuid}", params=params, json=body, headers=headers)


@pytest.mark.parametrize("action", ["stop", "kill", "reboot", "start"])
def test_the_action_may_be_in_the_body_alone(client, action) -> None:
    vm_uuid = create_running_vm(client)
    response = _post(client, vm_uuid, {"action": action, "idempotent": True})
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_uuid"])
    assert (job["name"], job["execution"]) == (
        "stop" if action == "kill" else action, "succeeded")


def test_an_update_may_name_its_action_in_the_body_too(client) -> None:
    vm_uuid = create_running_vm(client)
    for params in ({"action": "update"}, {}):
        response = _post(client, vm_uuid, {"action": "update", "alias": "x"}, **params)
        assert response.status_code == 202, response.text
        assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["alias"] == "x"


@pytest.mark.parametrize("extra", [{"timeout": 5}, {"origin": "adminui"},
                                   {"creator_uuid": OWNER}])
def test_timeout_origin_and_creator_uuid_may_be_in_the_body(client, extra) -> None:
    vm_uuid = create_running_vm(client)
    response = _post(client, vm_uuid, extra, action="stop", idempotent="true")
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("body, field", [
    ({"timeout": -1}, "timeout"), ({"timeout": "soon"}, "timeout"),
    ({"origin": ""}, "origin"), ({"creator_uuid": "nope"}, "creator_uuid"),
    ({"action": 5}, "action"), ({"action": "explode"}, "action"),
])
def test_body_parameters_are_checked_as_the_querys(client, services, body, field) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    response = _post(client, vm_uuid, {"action": "stop", **body})
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {field: "Invalid"}
    assert services.commands.head_position() == head


@pytest.mark.parametrize("query, body, field", [
    ({"action": "stop"}, {"action": "start"}, "action"),
    ({"action": "update"}, {"action": "stop", "alias": "x"}, "action"),
    ({"action": "stop", "timeout": "5"}, {"timeout": 6}, "timeout"),
    ({"action": "stop", "origin": "a"}, {"origin": "b"}, "origin"),
    ({"action": "stop", "creator_uuid": OWNER},
     {"creator_uuid": "6c8a8f2e-1a8d-4b9e-9a51-1b6b6e3a0c11"}, "creator_uuid"),
    ({"action": "stop", "idempotent": "true"}, {"idempotent": False}, "idempotent"),
    ({"action": "stop", "sync": "false"}, {"sync": True}, "sync"),
    ({"action": "stop", "owner_uuid": OWNER},
     {"owner_uuid": "6c8a8f2e-1a8d-4b9e-9a51-1b6b6e3a0c11"}, "owner_uuid"),
])
def test_a_parameter_given_twice_with_different_values_is_refused(
        client, services, query, body, field) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    message = f"{field} in the query and {field} in the body differ"
    for headers, status in ((None, 409), (V2, 422)):
        response = _post(client, vm_uuid, body, headers=headers, **query)
        assert (response.status_code, response.json()) == (status, {
            "code": "ConflictingParameters", "message": message,
            "errors": [{"field": field, "code": "Invalid", "message": message}]})
    assert services.commands.head_position() == head


def test_the_same_value_in_both_places_is_no_conflict(client) -> None:
    vm_uuid = create_running_vm(client)
    response = _post(client, vm_uuid, {"action": "stop", "timeout": 5, "idempotent": True,
                                       "owner_uuid": OWNER},
                     action="stop", timeout="5", idempotent="true", owner_uuid=OWNER)
    assert response.status_code == 202, response.text


def test_the_body_action_is_part_of_what_an_idempotency_key_names(paused, services) -> None:
    http = paused.http
    created = http.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 256})
    paused.run_jobs()
    vm_uuid = created.json()["vm_uuid"]
    key = {"Idempotency-Key": "body-action"}
    first = _post(http, vm_uuid, {"action": "stop"}, headers=key)
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    # the same request, the action in the body or in the query: the first answer again
    for again in (_post(http, vm_uuid, {"action": "stop"}, headers=key),
                  _post(http, vm_uuid, None, headers=key, action="stop"),
                  _post(http, vm_uuid, {"action": "stop"}, headers=key, action="stop")):
        assert (again.status_code, again.json()) == (202, first.json())
    # another action, wherever it is named, is another request
    for other in (_post(http, vm_uuid, {"action": "reboot"}, headers=key),
                  _post(http, vm_uuid, None, headers=key, action="reboot")):
        assert_error(other, 422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head


def test_quarantine_and_nic_actions_read_the_body_action_too(client) -> None:
    vm_uuid = create_running_vm(client)
    response = _post(client, vm_uuid, {"action": "remove_nics", "macs": ["02:00:00:00:00:00"]})
    # dispatched to remove_nics: refused for the MAC the VM does not have, not for "action"
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {"macs": "Invalid"}
    quarantined = _post(client, vm_uuid, {"action": "quarantine", "reason": "audit"})
    assert (quarantined.status_code, quarantined.json()["state"]) == (200, "quarantined")
    released = _post(client, vm_uuid, {"action": "release"}, action="release")
    assert (released.status_code, released.json()["state"]) == (200, "running")
