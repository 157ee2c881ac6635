"""The server and volume actions take their ``action`` from the body too, as the VM actions do
(``action_params.action_of``; api.md, "Endpoints"). Found by a tester: ``POST /servers/{uuid}``
with ``{"action": "reboot"}`` and no query answered ``action: Missing, "must be reboot or
remove"``, though the client had named it. Given in both places with different values, the
request is refused (``ConflictingParameters``) and records nothing."""

from __future__ import annotations

import pytest

from tests.api.helpers import V2, assert_error, error_fields

SERVER = "aaaaaaaa-0000-4000-8000-000000000002"
NET_A = "5f3c7d2e-1111-4222-8333-444455556666"


@pytest.fixture
def server(client) -> str:
    registered = client.post("/servers", json={"uuid": SERVER, "hostname": "extra2",
                                               "ram_mib": 4096, "cpus": 4})
    assert registered.status_code == 201, registered.text
    return SERVER


@pytest.fixture
def volume(client) -> str:
    created = client.post("/volumes", json={"name": "data"})
    assert created.status_code == 201, created.text
    return created.json()["uuid"]


def test_a_server_reboot_may_name_its_action_in_the_body_alone(client, server):
    rebooted = client.post(f"/servers/{server}", json={"action": "reboot", "boot_id": "boot-2"})
    assert rebooted.status_code == 202, rebooted.text
    assert rebooted.json()["boot_id"] == "boot-2"


def test_a_server_removal_may_name_its_action_in_the_body_alone(client, server):
    removed = client.post(f"/servers/{server}", json={"action": "remove"})
    assert removed.status_code == 200, removed.text
    assert removed.json()["status"] == "removed"


@pytest.mark.parametrize("where", ["query", "body"])
def test_a_server_removal_refuses_a_reboots_boot_id_and_removes_nothing(
        client, services, server, where):
    """A field of another action is refused, as a VM action refuses one (``{"action":
    "start", "signal": …}``): a removal sent with ``boot_id`` removed the server without a
    word (a tester)."""
    head = services.commands.head_position()
    params, body = ({"action": "remove"}, {}) if where == "query" else ({}, {"action": "remove"})
    refused = client.post(f"/servers/{server}", params=params, json={**body, "boot_id": "x"})
    assert error_fields(assert_error(refused, 409, "ValidationFailed")) == {"boot_id": "Invalid"}
    assert services.commands.head_position() == head
    assert client.get(f"/servers/{server}").json()["status"] != "removed"


def test_the_same_server_action_in_both_places_is_no_conflict(client, server):
    removed = client.post(f"/servers/{server}", params={"action": "remove"},
                          json={"action": "remove"})
    assert removed.status_code == 200, removed.text


@pytest.mark.parametrize(("path", "query", "body"), [
    ("/servers/{server}", "reboot", {"action": "remove"}),
    ("/volumes/{volume}", "detach_network", {"action": "attach_network",
                                             "network_uuid": NET_A, "address": "10.0.0.5"}),
])
def test_an_action_given_twice_with_different_values_is_refused(
        client, services, server, volume, path, query, body):
    url = path.format(server=server, volume=volume)
    head = services.commands.head_position()
    message = "action in the query and action in the body differ"
    for headers, status in ((None, 409), (V2, 422)):
        answer = client.post(url, params={"action": query}, json=body, headers=headers)
        assert (answer.status_code, answer.json()) == (status, {
            "code": "ConflictingParameters", "message": message,
            "errors": [{"field": "action", "code": "Invalid", "message": message}]})
    assert services.commands.head_position() == head


@pytest.mark.parametrize(("path", "words"), [
    ("/servers/{server}", "must be reboot or remove"),
    ("/volumes/{volume}", "must be one of attach_network, detach_network"),
])
def test_an_action_in_neither_place_is_missing(client, server, volume, path, words):
    answer = client.post(path.format(server=server, volume=volume), json={})
    body = assert_error(answer, 409, "ValidationFailed")
    assert error_fields(body) == {"action": "Missing"}
    assert body["errors"][0]["message"] == words


def test_a_body_action_that_is_no_action_is_invalid(client, server):
    answer = client.post(f"/servers/{server}", json={"action": "explode"})
    body = assert_error(answer, 409, "ValidationFailed")
    assert error_fields(body) == {"action": "Invalid"}


def test_volume_actions_may_name_their_action_in_the_body_alone(client, volume):
    attached = client.post(f"/volumes/{volume}", json={
        "action": "attach_network", "network_uuid": NET_A, "address": "10.0.0.5"})
    assert attached.status_code == 202, attached.text
    assert attached.json()["networks"] == {NET_A: "10.0.0.5"}
    detached = client.post(f"/volumes/{volume}", json={"action": "detach_network",
                                                       "network_uuid": NET_A})
    assert detached.status_code == 202, detached.text
    assert detached.json()["networks"] == {}


def test_the_openapi_schema_declares_the_body_action(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("ServerActionRequest", "AttachNetworkRequest", "DetachNetworkRequest"):
        assert "action" in schemas[name]["properties"], name


def test_a_body_action_is_the_query_action_to_an_idempotency_key(client, services, server):
    key = {"Idempotency-Key": "server-body-action"}
    first = client.post(f"/servers/{server}", params={"action": "reboot"},
                        json={"boot_id": "boot-3"}, headers=key)
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    again = client.post(f"/servers/{server}", json={"action": "reboot", "boot_id": "boot-3"},
                        headers=key)
    assert (again.status_code, again.json()) == (202, first.json())
    assert services.commands.head_position() == head
    other = client.post(f"/servers/{server}", json={"action": "remove"}, headers=key)
    assert_error(other, 422, "IdempotencyKeyReused")
