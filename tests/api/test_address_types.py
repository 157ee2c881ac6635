"""Every address a body carries is a JSON string: a number or a boolean is refused naming the
field, and nothing is stored (api.md "Networks and NICs", "Volumes"). Found by a tester:
``{"<net>": 16909060}`` stored a volume at 1.2.3.4, ``address: true`` at 0.0.0.1, CreateVm's
``"ip": 168034325`` gave a NIC 10.4.0.21, and ``"ip": true`` answered a Python repr."""

from __future__ import annotations

import pytest

from tests.api.helpers import act, assert_error, create_running_vm, error_fields, vm_body
from tests.api.test_networks import make_network

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

NOT_TEXT = [16909060, True, False, 1.5, None, ["10.2.0.3"], {"ip": "10.2.0.3"}]


@pytest.mark.parametrize("value", NOT_TEXT)
def test_a_volume_address_that_is_no_string_is_refused(client, services, value) -> None:
    network = make_network(client)
    head = services.commands.head_position()
    created = client.post("/volumes", json={"name": "v", "networks": {network["uuid"]: value}})
    body = assert_error(created, 409, "ValidationFailed")
    assert [e["field"] for e in body["errors"]] == [f"networks.{network['uuid']}"], body
    volume = client.post("/volumes", json={"name": "w"}).json()["uuid"]
    head = services.commands.head_position()
    attached = client.post(f"/volumes/{volume}", params={"action": "attach_network"},
                           json={"network_uuid": network["uuid"], "address": value})
    assert error_fields(assert_error(attached, 409, "ValidationFailed")) == {
        "address": "Invalid"}, attached.text
    assert services.commands.head_position() == head
    assert services.commands.load_network(network["uuid"]).claims == {}


@pytest.mark.parametrize("value", NOT_TEXT)
@pytest.mark.parametrize("form", ["ip", "ipv4_ips"])
def test_a_nic_address_that_is_no_string_is_refused_by_create_vm_and_add_nics(
        client, services, value, form) -> None:
    network = make_network(client)
    running = create_running_vm(client)
    entry = ({"uuid": network["uuid"], "ip": value} if form == "ip"
             else {"ipv4_uuid": network["uuid"], "ipv4_ips": [value]})
    head = services.commands.head_position()
    for answer in (client.post("/vms", json=vm_body(networks=[entry])),
                   act(client, running, "add_nics", json={"networks": [entry]})):
        body = assert_error(answer, 409, "ValidationFailed")
        assert error_fields(body) == {"networks": "Invalid"}, body
        message = body["errors"][0]["message"]
        assert message == ("ip must be a string holding an IPv4 address" if form == "ip"
                           else "ipv4_ips must hold strings, each an IPv4 address"), body
    assert services.commands.head_position() == head


@pytest.mark.parametrize("field", ["subnet", "provision_start_ip", "provision_end_ip",
                                   "gateway"])
def test_a_network_address_that_is_no_string_is_refused(client, field) -> None:
    body = {"name": "n", "subnet": "10.2.0.0/28", "provision_start_ip": "10.2.0.2",
            "provision_end_ip": "10.2.0.5", "gateway": "10.2.0.1", field: 167903233}
    answer = client.post("/networks", json=body)
    assert error_fields(assert_error(answer, 409, "ValidationFailed")) == {field: "Invalid"}
    assert client.get("/networks").json() == []
