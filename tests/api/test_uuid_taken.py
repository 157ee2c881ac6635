"""A create naming a uuid another resource has is ``ValidationFailed`` naming ``uuid``
(``Duplicate``), whatever kind that resource is (api.md, "Errors"). Found by a tester: a
POST /vms given a network's, a server's or a volume's uuid (and POST /networks, /volumes,
/servers given a VM's, and vm-agent's PutVm given a network's) took the other stream for a
concurrent writer and retried until it answered 503 "too many concurrent writers"."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import assert_error, create_running_vm, error_fields, vm_body

NETWORK = {"name": "n", "subnet": "10.7.0.0/24", "provision_start_ip": "10.7.0.10",
           "provision_end_ip": "10.7.0.20"}
SERVER = {"hostname": "taken", "ram_mib": 1024, "cpus": 1}


def _taken(response) -> None:
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {"uuid": "Duplicate"}, body


@pytest.fixture
def others(client) -> dict[str, str]:
    """The uuid of a resource of each kind."""
    return {
        "vm": create_running_vm(client),  # its provision done: nothing else appends
        "network": client.post("/networks", json=NETWORK).json()["uuid"],
        "server": client.get("/servers").json()[0]["uuid"],  # a simulated one: a fixed uuid
        "volume": client.post("/volumes", json={"name": "v"}).json()["uuid"],
    }


CREATES = {
    "vm": lambda client, taken: client.post("/vms", json=vm_body(uuid=taken)),
    "network": lambda client, taken: client.post("/networks", json={**NETWORK, "uuid": taken}),
    "server": lambda client, taken: client.post("/servers", json={**SERVER, "uuid": taken}),
    "volume": lambda client, taken: client.post("/volumes", json={"name": "w", "uuid": taken}),
    "vm found by its agent": lambda client, taken: client.put(
        f"/vms/{taken}", json={"uuid": taken, "state": "running"}),
}


@pytest.mark.parametrize("kind", CREATES, ids=CREATES)
def test_a_create_naming_another_kinds_uuid_is_a_duplicate_and_appends_nothing(
        client, services, others, kind) -> None:
    for other_kind, taken in others.items():
        if kind.startswith(other_kind):
            continue
        head = services.commands.head_position()
        _taken(CREATES[kind](client, taken))
        assert services.commands.head_position() == head, (kind, other_kind)


def test_a_fresh_uuid_is_still_created(client) -> None:
    fresh = str(uuid.uuid4())
    assert client.post("/vms", json=vm_body(uuid=fresh)).status_code == 202
