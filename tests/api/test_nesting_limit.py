"""JSON a client sends nests at most ``json_input.MAX_DEPTH`` (32) levels of objects and
arrays, a body's own object the first: anything deeper is refused naming its field, and
appends nothing (found by a tester: an update's ``context`` nested 900 levels was accepted,
and then every load of the VM recursed past Python's limit, so its commands answered 500 and
the job worker's every pass failed, running no job of any VM)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from domain.json_input import MAX_DEPTH, unstorable
from service.api.schemas import StrictModel
from tests.api.helpers import (
    V2, assert_error, create_running_vm, error_fields, vm_body,
)


def nested(levels: int) -> Any:
    """A JSON value of ``levels`` levels: an object around arrays (``{"a": [[...]]}``)."""
    value: Any = []
    for _ in range(levels - 2):
        value = [value]
    return {"a": value}


def test_unstorable_counts_levels_from_the_outermost() -> None:
    assert unstorable(nested(MAX_DEPTH)) is None
    assert unstorable(nested(MAX_DEPTH + 1), "context") == (
        f"context: nested more than {MAX_DEPTH} levels deep")
    assert unstorable(nested(MAX_DEPTH), "context", levels_above=1) is not None
    assert unstorable(nested(100_000)) is not None  # walked without recursion


def _strict_models() -> list[type[StrictModel]]:
    found, pending = [], [StrictModel]
    while pending:
        model = pending.pop()
        found.append(model)
        pending.extend(model.__subclasses__())
    return found


@pytest.mark.parametrize("model", _strict_models(), ids=lambda m: m.__name__)
def test_every_field_of_every_body_refuses_deep_json_naming_the_field(model) -> None:
    for name in model.model_fields:
        errors = _errors(model, {name: nested(MAX_DEPTH)})  # under the body's own object
        assert any(e["loc"] == (name,) and "nested more than" in e["msg"] for e in errors), (
            name, errors)


def _errors(model: type[StrictModel], data: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        model.model_validate(data)
    except Exception as error:  # noqa: BLE001 - pydantic's ValidationError
        return error.errors()  # type: ignore[attr-defined]
    return []


def test_a_deep_update_context_is_refused_naming_it_and_appends_nothing(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    body = assert_error(client.post(f"/vms/{vm_uuid}?action=update",
                                    json={"alias": "d", "context": nested(900)}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"context": "Invalid"}, body
    assert f"nested more than {MAX_DEPTH} levels deep" in body["errors"][0]["message"]
    assert_error(client.post(f"/vms/{vm_uuid}?action=stop", headers=V2,
                             json={"context": nested(MAX_DEPTH)}), 422, "ValidationFailed")
    assert services.commands.head_position() == head
    # one level less is taken
    accepted = client.post(f"/vms/{vm_uuid}?action=update",
                           json={"alias": "d", "context": nested(MAX_DEPTH - 1)})
    assert accepted.status_code == 202, accepted.text


def test_a_deep_x_context_is_refused_naming_it(client, services) -> None:
    head = services.commands.head_position()
    deep = '{"a":' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    body = assert_error(client.post("/vms", json=vm_body(), headers={"x-context": deep}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"x-context": "Invalid"}, body
    assert "nested more than" in body["errors"][0]["message"]
    assert services.commands.head_position() == head


DEEP_BODIES = {
    "CreateVm": ("post", "/vms", lambda: vm_body(tags=nested(MAX_DEPTH)), "tags"),
    "PutVms": ("put", f"/vms?server_uuid={uuid.uuid4()}", lambda: {"vms": nested(MAX_DEPTH)},
               "vms"),
    "PutVm": ("put", f"/vms/{uuid.uuid4()}", lambda: {"state": "running",
                                                      "customer_metadata": nested(40)},
              "customer_metadata"),
    "CreateVolume": ("post", "/volumes", lambda: {"name": nested(MAX_DEPTH)}, "name"),
    "CreateNetwork": ("post", "/networks", lambda: {"name": nested(MAX_DEPTH)}, "name"),
    "CreateServer": ("post", "/servers", lambda: {"hostname": nested(MAX_DEPTH)}, "hostname"),
}


@pytest.mark.parametrize(("method", "path", "make", "field"), DEEP_BODIES.values(),
                         ids=DEEP_BODIES.keys())
def test_every_kind_of_body_refuses_deep_json(client, services, method, path, make,
                                              field) -> None:
    head = services.commands.head_position()
    response = client.request(method, path, json=make())
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    assert body["code"] == "ValidationFailed", body
    assert error_fields(body).get(field) == "Invalid", body
    assert services.commands.head_position() == head
