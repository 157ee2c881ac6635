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


# What an owner has: its VMs, their jobs, their counts, their changes, and the console's
# views of them. Only these routes take owner_uuid; every other refuses it.
OWNED = ("/vms", "/jobs", "/stats/", "/changes", "/console/fragments/fleet",
         "/console/fragments/vms/")


def test_only_the_routes_of_what_an_owner_has_declare_owner_uuid(client):
    """A reviewer found more routes taking the parameter and ignoring it (the changefeed's
    listing and stats, the console's servers and audit fragments): the schema is the list."""
    paths = client.get("/openapi.json").json()["paths"]
    declaring = {(method, path) for path, operations in paths.items()
                 for method, operation in operations.items()
                 if any(p["name"] == "owner_uuid" for p in operation.get("parameters", []))}
    assert declaring, "no route declares owner_uuid: the test would pass on nothing"
    assert {(m, p) for m, p in declaring if not p.startswith(OWNED)} == set()


@pytest.mark.parametrize("path", ["/changefeeds", "/changefeeds/stats",
                                  "/console/fragments/servers", "/console/fragments/audit"])
def test_the_changefeeds_and_consoles_unowned_reads_refuse_owner_uuid(client, path):
    answer = client.get(path, params={"owner_uuid": OTHER_OWNER})
    assert answer.status_code in (400, 409, 422), answer.text
    assert "owner_uuid" in answer.text


@pytest.mark.parametrize("path", ["/servers", "/volumes", "/networks"])
def test_a_list_of_unowned_things_refuses_owner_uuid(client, path):
    _refused(client.get(path, params={"owner_uuid": OTHER_OWNER}))
