"""Servers, volumes, networks and the simulation's routes take no ``owner_uuid``: nothing of
theirs has an owner, so the parameter scoped nothing. Found by a tester: ``POST
/servers/{uuid}?action=reboot&owner_uuid=<owner B>`` was validated, then ignored, and failed
owner A's VMs on that server, while the schema said another owner's things are not found.
It is refused as any parameter a route does not take, and nothing is recorded (api.md, the
OpenAPI schema's parameters)."""

from __future__ import annotations

import pytest

from tests.api.helpers import OTHER_OWNER, assert_error, create_running_vm, get_vm

def _refused(answer) -> None:
    body = assert_error(answer, 409, "ValidationFailed")
    assert {"field": "owner_uuid", "code": "Invalid",
            "message": "Invalid parameter"} in body["errors"], body


def test_a_server_reboot_scoped_to_an_owner_is_refused_and_fails_no_vm(client, services):
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    head = services.commands.head_position()
    _refused(client.post(f"/servers/{server}", params={"action": "reboot",
                                                       "owner_uuid": OTHER_OWNER}, json={}))
    assert services.commands.head_position() == head
    assert get_vm(client, vm_uuid)["state"] == "running"


def test_no_unowned_route_declares_owner_uuid(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path, operations in paths.items():
        if not path.startswith(("/servers", "/volumes", "/networks", "/sim")):
            continue
        for method, operation in operations.items():
            names = {p["name"] for p in operation.get("parameters", [])}
            assert "owner_uuid" not in names, (method, path)


@pytest.mark.parametrize("path", ["/servers", "/volumes", "/networks"])
def test_a_list_of_unowned_things_refuses_owner_uuid(client, path):
    _refused(client.get(path, params={"owner_uuid": OTHER_OWNER}))
