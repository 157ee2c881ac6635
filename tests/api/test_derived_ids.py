"""The streams the service names itself, from a name (an alias hold: an owner and an alias;
an external network's noted addresses: a network uuid), have ids no client-chosen uuid may
take (domain/derived_ids.py). A tester's: an owner's CreateVm with ``uuid`` set to another
owner's future hold of ``web`` (its id computed from the source) made every later request
for that alias, and a network uuid's noted volumes, fail with 503 for good."""

from __future__ import annotations

import pytest

from domain.alias_hold import hold_id
from domain.network_external import external_id
from service.settings import Settings
from tests.api.helpers import OTHER_OWNER, assert_error, error_fields, vm_body, wait_job

NETWORK = "5f3c7d2e-1111-4222-8333-444455550099"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The tests' settings with ``VMLEDGER_UNIQUE_ALIASES`` on (alias holds written)."""
    return settings.model_copy(update={"unique_aliases": True})


def _taken(response) -> None:
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {"uuid": "Duplicate"}, body


@pytest.mark.parametrize("derived", [
    str(hold_id(OTHER_OWNER, "web")), str(external_id(NETWORK)),
], ids=["alias-hold", "external-network"])
def test_no_resource_may_take_a_derived_streams_id(client, services, derived) -> None:
    head = services.commands.head_position()
    _taken(client.post("/vms", json=vm_body(uuid=derived)))
    _taken(client.post("/networks", json={
        "uuid": derived, "name": "n", "subnet": "10.89.0.0/24",
        "provision_start_ip": "10.89.0.10", "provision_end_ip": "10.89.0.20"}))
    assert services.commands.head_position() == head  # nothing appended


def test_the_alias_and_the_network_uuid_stay_usable(client) -> None:
    client.post("/vms", json=vm_body(uuid=str(hold_id(OTHER_OWNER, "web"))))
    client.post("/vms", json=vm_body(uuid=str(external_id(NETWORK))))
    created = client.post("/vms", json=vm_body(owner_uuid=OTHER_OWNER, alias="web"))
    assert created.status_code == 202, created.text
    wait_job(client, created.json()["job_uuid"])
    volume = client.post("/volumes", json={"name": "ext", "networks": {NETWORK: "10.89.0.10"}})
    assert volume.status_code == 201, volume.text
    network = client.post("/networks", json={
        "uuid": NETWORK, "name": "n", "subnet": "10.89.0.0/24",
        "provision_start_ip": "10.89.0.10", "provision_end_ip": "10.89.0.20"})
    assert network.status_code == 201, network.text
    assert network.json()["addresses_in_use"] == 1


def test_an_agent_cannot_report_a_vm_under_a_derived_id(client, services) -> None:
    server = client.get("/servers").json()[0]["uuid"]
    derived = str(hold_id(OTHER_OWNER, "web"))
    head = services.commands.head_position()
    response = client.put(f"/vms/{derived}", json={
        "uuid": derived, "owner_uuid": OTHER_OWNER, "brand": "joyent", "ram": 256,
        "state": "running", "server_uuid": server})
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {"uuid": "Duplicate"}
    assert services.commands.head_position() == head
