"""Every UUID a client gives, in a body or the query, is taken as VMAPI takes one: lowercase
and hyphenated (its UUID_RE; the spec: "UUIDs are lowercase"), anything else refused naming
the field with VMAPI's words, ``Invalid UUID`` (docs/vmapi-compatibility.md, "VMAPI's error
texts"). pydantic's UUID took upper case, no hyphens, braces and ``urn:uuid:``, and answered
"Input should be a valid UUID, invalid length: found 3"."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import (
    OWNER, V2, assert_error, create_running_vm, create_vm, get_vm, vm_body,
)

NOT_CANONICAL = ["777777772222433384445555555555ab", OWNER.upper(), "{" + OWNER + "}",
                 "urn:uuid:" + OWNER, OWNER + "\n", "bad", "", 5, True]


def _invalid_uuid(response, field: str, message: str, status: int = 409) -> None:
    body = assert_error(response, status, "ValidationFailed")
    assert (body["message"], body["errors"]) == (
        message, [{"field": field, "code": "Invalid", "message": "Invalid UUID"}]), body


@pytest.mark.parametrize("field", ["owner_uuid", "image_uuid", "server_uuid", "uuid",
                                   "creator_uuid"])
@pytest.mark.parametrize("value", NOT_CANONICAL)
def test_create_vm_refuses_a_uuid_vmapi_would_not_take(client, services, field, value) -> None:
    head = services.commands.head_position()
    response = client.post("/vms", json=vm_body(**{field: value}))
    _invalid_uuid(response, field, "Invalid VM parameters")
    assert services.commands.head_position() == head


def test_a_volume_mounts_uuid_is_refused_in_the_same_words(client) -> None:
    response = client.post("/vms", json=vm_body(
        volumes=[{"volume_uuid": OWNER.upper(), "mountpoint": "/data"}]), headers=V2)
    _invalid_uuid(response, "volumes.0.volume_uuid", "Invalid VM parameters", 422)


@pytest.mark.parametrize("field", ["owner_uuid", "creator_uuid"])
def test_an_action_or_update_refuses_a_body_uuid_vmapi_would_not_take(client, field) -> None:
    vm_uuid = create_running_vm(client)
    update = client.post(f"/vms/{vm_uuid}", params={"action": "update"},
                         json={"alias": "x", field: OWNER.upper()})
    _invalid_uuid(update, field, "Invalid VM update parameters")
    stop = client.post(f"/vms/{vm_uuid}", params={"action": "stop"},
                       json={field: "bad"})
    _invalid_uuid(stop, field, "Invalid Parameters")


def test_a_query_uuid_is_held_to_the_same_rule(client) -> None:
    vm_uuid = create_vm(client)["vm_uuid"]
    for value in (OWNER.upper(), "{" + OWNER + "}", OWNER.replace("-", "")):
        response = client.get(f"/vms/{vm_uuid}", params={"owner_uuid": value})
        _invalid_uuid(response, "owner_uuid", "Invalid Parameters")
    assert get_vm(client, vm_uuid, owner_uuid=OWNER)["uuid"] == vm_uuid


def test_put_vm_refuses_a_uuid_vmapi_would_not_take(client) -> None:
    vm_uuid = str(uuid.uuid4())
    for field in ("uuid", "owner_uuid", "server_uuid", "image_uuid"):
        response = client.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, "state": "running",
                                                        field: vm_uuid.upper()})
        _invalid_uuid(response, field, "Invalid Parameters")


def test_other_bodies_uuids_are_held_to_the_same_rule(client) -> None:
    upper = str(uuid.uuid4()).upper()
    for path, body, field in (
            ("/servers", {"uuid": upper, "hostname": "cn9"}, "uuid"),
            ("/networks", {"uuid": upper, "name": "n9", "subnet": "10.9.0.0/24"}, "uuid"),
            ("/volumes", {"uuid": upper, "name": "v9"}, "uuid")):
        response = client.post(path, json=body)
        body_ = assert_error(response, 409, "ValidationFailed")
        assert {"field": field, "code": "Invalid", "message": "Invalid UUID"} in body_["errors"]
