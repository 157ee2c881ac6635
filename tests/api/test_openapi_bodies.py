"""The request bodies the schema declares are those the routes take (docs/api.md, "OpenAPI
schema"): ``POST /vms/{uuid}`` was declared as ``UpdateVmRequest`` (no ``reason``,
``networks``, ``macs`` nor ``signal``, and no unknown field allowed), so every documented
quarantine, add_nics, remove_nics and kill body broke the schema, and generated clients
could not send them (found by a tester). Now each action's example validates against the
declared body and against the model the route validates it by, and the route takes it."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest

from service.api.action_params import without_action
from service.api.app import create_app
from service.api.vm_actions import (
    ACTION_BODIES, EVERY_ACTION, EXAMPLES, QUARANTINE_ACTIONS, VmActionRequest,
)
from service.settings import Settings

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"


def _body_schema(schema: dict, method: str, path: str) -> dict[str, Any]:
    """The declared JSON body of ``method path``, its references resolvable."""
    body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]
    return {**body["schema"], "components": schema["components"]}


def _examples(schema: dict) -> dict[str, Any]:
    body = schema["paths"]["/vms/{vm_uuid}"]["post"]["requestBody"]["content"][
        "application/json"]
    return {name: example["value"] for name, example in body["examples"].items()}


def test_each_actions_example_validates_against_the_declared_body_and_its_model() -> None:
    schema = create_app(Settings()).openapi()
    declared = jsonschema_rs.validator_for(_body_schema(schema, "post", "/vms/{vm_uuid}"))
    examples = _examples(schema)
    assert set(examples) == set(EVERY_ACTION) == set(ACTION_BODIES)
    for action, body in examples.items():
        assert body == EXAMPLES[action]
        errors = [error.message for error in declared.iter_errors(body)]
        assert not errors, (action, errors)
        model = ACTION_BODIES[action]
        model.model_validate(without_action(body) if action in QUARANTINE_ACTIONS else body)
    # every field an action takes, none other (each action's model refuses unknown fields)
    properties = schema["components"]["schemas"]["VmActionRequest"]
    assert properties["additionalProperties"] is False
    assert set(properties["properties"]) == {
        name for model in ACTION_BODIES.values() for name in model.model_fields}
    assert all(field.get("description") for field in properties["properties"].values())
    assert not declared.is_valid({"action": "start", "quota": 1})
    assert not declared.is_valid({"action": "suspend"})
    assert VmActionRequest.model_fields["reason"].description.endswith("quarantine")


def test_the_other_bodies_a_route_tells_apart_are_each_declared() -> None:
    schema = create_app(Settings()).openapi()
    reports = jsonschema_rs.validator_for(_body_schema(schema, "put", "/vms/{vm_uuid}"))
    assert reports.is_valid({"state": "running", "server_uuid": OWNER, "boot_id": "b1",
                             "generation": 3})
    # vm-agent's whole VM object, fields vmledger does not read included
    assert reports.is_valid({"uuid": OWNER, "state": "running", "zone_state": "running",
                             "last_modified": "2026-01-01T00:00:00Z"})
    volumes = jsonschema_rs.validator_for(
        _body_schema(schema, "post", "/volumes/{volume_uuid}"))
    assert volumes.is_valid({"network_uuid": OWNER, "address": "10.0.0.5"})
    assert volumes.is_valid({"network_uuid": OWNER})
    assert not volumes.is_valid({"network_uuid": OWNER, "mtu": 1500})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_route_takes_each_actions_example(paused) -> None:
    http = paused.http
    network = http.post("/networks", json={
        "uuid": EXAMPLES["add_nics"]["networks"][0]["uuid"], "name": "example",
        "subnet": "10.9.0.0/24", "provision_start_ip": "10.9.0.10",
        "provision_end_ip": "10.9.0.20", "gateway": "10.9.0.1"})
    assert network.status_code == 201, network.text
    created = http.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 256})
    paused.run_jobs()
    vm_uuid = created.json()["vm_uuid"]
    # the worker stays paused: the VM stays running while the actions queue their jobs
    for action in ("start", "stop", "kill", "reboot", "update", "add_nics", "remove_nics",
                   "quarantine", "release"):
        body = EXAMPLES[action]
        if action == "remove_nics":  # the NIC add_nics just recorded (its MAC is new)
            nics = http.get(f"/vms/{vm_uuid}").json()["nics"]
            body = {**body, "macs": [nics[-1]["mac"]]}
        answer = http.post(f"/vms/{vm_uuid}", json=body)
        assert answer.status_code in (200, 202), (action, answer.text)
