"""A VM's ``customer_metadata``, ``internal_metadata`` and ``tags`` as VMAPI takes them: an
object, or its JSON text (createVm's ``createValidateMetadataFn`` and UpdateVm's
``createMetadataObject`` parse a string; vm-agent's PutVm report too, ``translateVm``), and
each value a string, number or boolean, anything else ``Forbidden Data Type`` naming the key
(``validMetadata``). A tester found the JSON text refused ("Input should be a valid
dictionary") and a nested or null value answered in pydantic's words."""

from __future__ import annotations

import json

import pytest

from tests.api.helpers import OWNER, act, assert_error, create_running_vm, get_vm, vm_body

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

FIELDS = ("customer_metadata", "internal_metadata", "tags")
CREATE, UPDATE = "Invalid VM parameters", "Invalid VM update parameters"


def _create(client, **fields):
    return client.post("/vms", json=vm_body(**fields))


def _update(client, vm_uuid: str, **fields):
    return act(client, vm_uuid, "update", json=fields)


def _only_error(response, top: str, field: str, message: str) -> None:
    body = assert_error(response, 409, "ValidationFailed")
    assert body["message"] == top
    assert body["errors"] == [{"field": field, "code": "Invalid", "message": message}]


@pytest.mark.parametrize("field", FIELDS)
def test_a_create_takes_each_as_its_json_text(client, field) -> None:
    response = _create(client, **{field: json.dumps({"a": "x", "n": 1, "b": True})})
    assert response.status_code == 202, response.text
    assert get_vm(client, response.json()["vm_uuid"])[field] == {"a": "x", "n": 1, "b": True}


@pytest.mark.parametrize("field", FIELDS)
def test_an_update_takes_each_as_its_json_text(client, field) -> None:
    vm_uuid = create_running_vm(client)
    response = _update(client, vm_uuid, **{field: '{"role": "web"}'})
    assert response.status_code == 202, response.text
    client.get(f"/jobs/{response.json()['job_uuid']}/wait", params={"timeout": 10})
    assert get_vm(client, vm_uuid)[field] == {"role": "web"}


def test_an_agents_report_takes_them_as_json_text_too(client) -> None:
    vm_uuid = "5f4d8c1e-9a7b-4c3d-8e2f-1a0b9c8d7e6f"
    report = {"uuid": vm_uuid, "owner_uuid": OWNER, "brand": "joyent", "ram": 256,
              "state": "running", "customer_metadata": '{"a": "b"}', "tags": '{"t": 1}',
              "server_uuid": None}
    response = client.put(f"/vms/{vm_uuid}", json=report)
    assert response.status_code == 200, response.text
    vm = get_vm(client, vm_uuid)
    assert (vm["customer_metadata"], vm["tags"]) == ({"a": "b"}, {"t": 1})


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("text", ["{not json", "", '{"a": 1'])
def test_text_that_is_not_json_is_malformed_json(client, field, text) -> None:
    _only_error(_create(client, **{field: text}), CREATE, field, "Malformed JSON")
    vm_uuid = create_running_vm(client)
    _only_error(_update(client, vm_uuid, **{field: text}), UPDATE, field, "Malformed JSON")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", ["5", "[1]", '"x"', "null", "true", 5, [1], True, "x"])
def test_json_that_is_not_an_object_is_an_invalid_data_type(client, field, value) -> None:
    # "x" is no JSON at all: Malformed JSON, tested above; the others parse to no object
    if value == "x":
        value = '"x"'
    _only_error(_create(client, **{field: value}), CREATE, field, "Invalid data type")
    vm_uuid = create_running_vm(client)
    _only_error(_update(client, vm_uuid, **{field: value}), UPDATE, field, "Invalid data type")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", [None, {"b": 1}, [1], []])
def test_a_value_that_is_no_string_number_or_boolean_is_forbidden(client, field, value
                                                                  ) -> None:
    given = {"ok": "x", "a": value, "z": {"c": 2}}  # the first in key order is told
    _only_error(_create(client, **{field: given}), CREATE, f"{field}.a", "Forbidden Data Type")
    _only_error(_create(client, **{field: json.dumps(given)}), CREATE, f"{field}.a",
                "Forbidden Data Type")
    vm_uuid = create_running_vm(client)
    _only_error(_update(client, vm_uuid, **{field: given}), UPDATE, f"{field}.a",
                "Forbidden Data Type")


def test_the_first_problem_in_key_order_is_told_forbidden_type_or_password_key(client
                                                                             ) -> None:
    _only_error(_create(client, customer_metadata={"root_pw": "x", "a": None}), CREATE,
                "customer_metadata.root_pw", "Forbidden Metadata Key")
    _only_error(_create(client, customer_metadata={"a": None, "root_pw": "x"}), CREATE,
                "customer_metadata.a", "Forbidden Data Type")


def test_json_text_is_held_to_every_rule_of_an_object(client) -> None:
    _only_error(_create(client, customer_metadata='{"root_pw": "x"}'), CREATE,
                "customer_metadata.root_pw", "Forbidden Metadata Key")
    _only_error(_create(client, tags='{"triton.foo": true}'), CREATE, "tags",
                'Unrecognized special triton tag "triton.foo"')
    body = assert_error(_create(client, tags='{"a": "\\u0000"}'), 409, "ValidationFailed")
    assert body["errors"][0]["field"] == "tags"
    assert "NUL" in body["errors"][0]["message"]
    # a key given twice, as the object's (tests/api/test_list_and_json_text_errors.py)
    body = assert_error(_create(client, tags='{"a": 1, "a": 2}'), 409, "ValidationFailed")
    assert (body["message"], body["errors"]) == ("Invalid Parameters", [
        {"field": "tags.a", "code": "Invalid", "message": "may be given only once"}])
    many = json.dumps({f"k{i}": i for i in range(129)})
    _only_error(_create(client, tags=many), CREATE, "tags", "at most 128 keys")


def test_null_still_means_none_on_a_create_and_empties_on_an_update(client) -> None:
    response = _create(client, tags=None)
    assert response.status_code == 202, response.text
    vm_uuid = create_running_vm(client, tags={"a": "b"})
    response = _update(client, vm_uuid, tags=None)
    assert response.status_code == 202, response.text
    client.get(f"/jobs/{response.json()['job_uuid']}/wait", params={"timeout": 10})
    assert get_vm(client, vm_uuid)["tags"] == {}
