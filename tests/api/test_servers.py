"""``POST /servers``: a compute node registered once; a repeat as described answers it again,
a repeat with another description is refused (found by a new user: it answered 200 with the
old server, the new values dropped without a word). A server's ``ETag`` is its version, and
its actions honour ``If-Match`` on it."""

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


# -- If-Match on the server actions (api.md, "Contract: concurrency and idempotency"): they
# used to ignore it, a stale or malformed one included --------------------------------------

ACTIONS = [("reboot", {"boot_id": "boot-2"}, 202), ("remove", None, 200)]


def _etag(response) -> int:
    return int(response.headers["etag"].strip('"'))


def test_a_servers_etag_is_its_version_and_moves_with_every_change_to_it(client, services):
    registered = client.post("/servers", json=BODY)
    assert _etag(registered) == registered.json()["version"] == 1
    read = client.get(f"/servers/{SERVER}")
    assert _etag(read) == read.json()["version"] == 1
    assert client.head(f"/servers/{SERVER}").headers["etag"] == '"1"'
    # a VM placed there claims capacity on the server's stream: the server changed
    fleet_server = next(iter(services.fleet.servers())).uuid
    before = _etag(client.get(f"/servers/{fleet_server}"))
    create_running_vm(client, server_uuid=fleet_server)
    after = client.get(f"/servers/{fleet_server}")
    assert _etag(after) == after.json()["version"] > before
    assert after.json() in client.get("/servers").json()


@pytest.mark.parametrize(("action", "body", "status"), ACTIONS, ids=["reboot", "remove"])
def test_a_server_action_with_the_current_if_match_or_a_star_is_taken(
        client, action, body, status):
    etag = client.post("/servers", json=BODY).headers["etag"]
    taken = client.post(f"/servers/{SERVER}", params={"action": action}, json=body,
                        headers={"If-Match": etag})
    assert taken.status_code == status, taken.text
    assert _etag(taken) == taken.json()["version"] == 2
    again = client.post(f"/servers/{SERVER}", params={"action": action}, json=body,
                        headers={"If-Match": "*"})
    assert again.status_code == status, again.text


@pytest.mark.parametrize(("action", "body", "status"), ACTIONS, ids=["reboot", "remove"])
def test_a_server_action_with_a_stale_if_match_is_412_and_changes_nothing(
        client, services, action, body, status):
    fleet_server = next(iter(services.fleet.servers())).uuid
    stale = client.get(f"/servers/{fleet_server}").headers["etag"]
    create_running_vm(client, server_uuid=fleet_server)  # the server changes under the ETag
    before = client.get(f"/servers/{fleet_server}")
    head = services.commands.head_position()
    refused = client.post(f"/servers/{fleet_server}", params={"action": action}, json=body,
                          headers={"If-Match": stale})
    assert assert_error(refused, 412, "PreconditionFailed")["current_version"] == _etag(before)
    assert refused.headers["etag"] == before.headers["etag"]
    assert services.commands.head_position() == head
    assert client.get(f"/servers/{fleet_server}").json() == before.json()


@pytest.mark.parametrize(("action", "body", "status"), ACTIONS, ids=["reboot", "remove"])
@pytest.mark.parametrize("if_match", ["yesterday", "W/5", '"0"'])
@pytest.mark.parametrize(("version", "code"), [("~1", 409), ("~2", 422)])
def test_a_server_action_with_a_malformed_if_match_is_refused_naming_it(
        client, services, action, body, status, if_match, version, code):
    assert client.post("/servers", json=BODY).status_code == 201
    head = services.commands.head_position()
    refused = client.post(f"/servers/{SERVER}", params={"action": action}, json=body,
                          headers={"If-Match": if_match, "Accept-Version": version})
    assert error_fields(assert_error(refused, code, "ValidationFailed")) == {
        "If-Match": "Invalid"}
    assert services.commands.head_position() == head


def test_a_reboot_of_a_removed_server_is_refused_naming_its_state(client, services):
    # found by a tester: it answered 202 and recorded a new boot id for a host no longer in
    # the fleet
    assert client.post("/servers", json=BODY).status_code == 201
    assert client.post(f"/servers/{SERVER}", params={"action": "remove"}).status_code == 200
    head = services.commands.head_position()
    for headers, status in (({}, 409), ({"Accept-Version": "~2"}, 409)):
        response = client.post(f"/servers/{SERVER}", params={"action": "reboot"},
                               json={"boot_id": "b2"}, headers=headers)
        body = assert_error(response, status, "InvalidTransition")
        assert (body["state"], body["allowed_actions"]) == ("removed", ["remove"]), body
        assert "removed" in body["message"]
    assert services.commands.head_position() == head
    # a repeated removal is still taken, recording nothing
    assert client.post(f"/servers/{SERVER}", params={"action": "remove"}).status_code == 200
    assert services.commands.head_position() == head
