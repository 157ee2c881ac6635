"""``POST /servers``: a compute node registered once; a repeat as described answers it again,
a repeat with another description is refused (found by a new user: it answered 200 with the
old server, the new values dropped without a word)."""

from __future__ import annotations

import pytest

from tests.api.helpers import (
    assert_error, create_running_vm, create_vm, error_fields, get_vm, wait_job,
)

SERVER = "aaaaaaaa-0000-4000-8000-000000000001"
BODY = {"uuid": SERVER, "hostname": "extra1", "ram_mib": 4096, "cpus": 4}


def test_a_registration_repeated_as_described_answers_the_server_again_appending_nothing(
        client, services):
    first = client.post("/servers", json=BODY)
    assert first.status_code == 201, first.text
    head = services.commands.head_position()
    again = client.post("/servers", json=BODY)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert services.commands.head_position() == head


@pytest.mark.parametrize("changed", [{"hostname": "other"}, {"ram_mib": 8192}, {"cpus": 8}])
def test_a_registration_repeated_with_another_description_is_refused_naming_uuid(
        client, services, changed):
    assert client.post("/servers", json=BODY).status_code == 201
    head = services.commands.head_position()
    body = assert_error(client.post("/servers", json={**BODY, **changed}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"uuid": "Duplicate"}
    assert next(iter(changed)) in body["errors"][0]["message"]
    assert services.commands.head_position() == head
    assert client.get(f"/servers/{SERVER}").json()["hostname"] == "extra1"


def test_a_servers_recorded_status_is_what_the_read_model_says(client, services):
    assert services.servers.status(SERVER) is None
    assert client.post("/servers", json=BODY).status_code == 201
    assert services.servers.status(SERVER) == "running"
    removed = client.post(f"/servers/{SERVER}", params={"action": "remove"})
    assert removed.status_code == 200, removed.text
    assert services.servers.status(SERVER) == "removed"


# -- a server the compute driver does not have (tester B, B8) --------------------------------

BIG = {"uuid": "aaaaaaaa-bbbb-4ccc-8ddd-ffffffffffff", "hostname": "big",
       "ram_mib": 4_000_000, "cpus": 4096}


def test_a_registered_server_the_fleet_does_not_have_is_not_placed_on(client, services):
    # It has the most free RAM by far: placement used to pick it, and every provision failed
    # with "unknown server".
    assert client.post("/servers", json=BIG).status_code == 201
    fleet = {server.uuid for server in services.fleet.servers()}
    for _ in range(3):
        vm_uuid = create_running_vm(client)
        assert get_vm(client, vm_uuid)["server_uuid"] in fleet
    assert client.get(f"/servers/{BIG['uuid']}").json()["ram_allocated_mib"] == 0


def test_a_vm_pinned_to_a_server_the_fleet_does_not_have_fails_naming_it(client, services):
    assert client.post("/servers", json=BIG).status_code == 201
    created = create_vm(client, server_uuid=BIG["uuid"])
    provision = wait_job(client, created["job_uuid"])
    assert provision["execution"] == "failed"
    assert f"unknown server {BIG['uuid']}" in provision["chain_results"][-1]["error"]
    assert client.get(f"/servers/{BIG['uuid']}").json()["ram_allocated_mib"] == 0
