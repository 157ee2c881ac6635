"""The agents' reports (``PUT /vms/{uuid}``, ``PUT /vms?server_uuid=``) take no ``owner_uuid``:
a report is what a server saw of its VMs, whoever owns them, and no owner scopes it. Found by
a tester: ``PUT /vms/{uuid}?owner_uuid=<another owner>`` was validated and then ignored, the
report applied to a VM the parameter, everywhere else, would have made 404. It is refused as
any parameter the route does not take, and nothing is recorded (api.md, "Compute agents")."""

from __future__ import annotations

import pytest

from tests.api.helpers import OTHER_OWNER, OWNER, assert_error, create_running_vm, get_vm


def _report(client, vm_uuid: str, params: dict) -> object:
    vm = get_vm(client, vm_uuid)
    server = client.get(f"/servers/{vm['server_uuid']}").json()
    return client.put(f"/vms/{vm_uuid}", params=params, json={
        "state": "stopped", "server_uuid": vm["server_uuid"], "boot_id": server["boot_id"],
        "generation": 99})


@pytest.mark.parametrize("owner", [OTHER_OWNER, OWNER, "not-a-uuid"])
def test_a_vm_report_refuses_owner_uuid_and_records_nothing(client, services, owner):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    body = assert_error(_report(client, vm_uuid, {"owner_uuid": owner}), 409,
                        "ValidationFailed")
    assert body["errors"] == [{"field": "owner_uuid", "code": "Invalid",
                               "message": "Invalid parameter"}]
    assert services.commands.head_position() == head
    assert get_vm(client, vm_uuid)["state"] == "running"


def test_an_inventory_refuses_owner_uuid_and_records_nothing(client, services):
    vm_uuid = create_running_vm(client)
    vm = get_vm(client, vm_uuid)
    server = client.get(f"/servers/{vm['server_uuid']}").json()
    head = services.commands.head_position()
    answer = client.put("/vms", params={"server_uuid": vm["server_uuid"],
                                        "owner_uuid": OTHER_OWNER},
                        json={"boot_id": server["boot_id"], "generation": 99,
                              "vms": {vm_uuid: {"state": "stopped"}}})
    body = assert_error(answer, 409, "ValidationFailed")
    assert body["errors"] == [{"field": "owner_uuid", "code": "Invalid",
                               "message": "Invalid parameter"}]
    assert services.commands.head_position() == head


def test_a_report_without_owner_uuid_is_applied(client):
    vm_uuid = create_running_vm(client)
    assert _report(client, vm_uuid, {}).status_code == 200
    assert get_vm(client, vm_uuid)["state"] == "stopped"


def test_the_openapi_schema_declares_no_owner_uuid_on_the_reports(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/vms/{vm_uuid}", "/vms"):
        names = {p["name"] for p in paths[path]["put"].get("parameters", [])}
        assert "owner_uuid" not in names and "consistency" in names, (path, names)
