"""What one CreateVm or ``add_nics`` asks of networks (api.md "Networks and NICs";
service/api/network_params.py, service/commands/networks.py): found by a tester, an address
asked for was refused as in use when an earlier NIC of the same request was handed it
automatically; an empty name in a comma-separated list was looked up as a network; ``ip``
beside ``ipv4_ips`` was dropped silently; a bad ``ip`` was told as ``ipv4_ips``; and a /31
or /32 network was accepted though it can hand out no address."""

from __future__ import annotations

import pytest

from tests.api.helpers import (
    act, assert_error, create_running_vm, create_vm, error_fields, get_vm, vm_body,
)
from tests.api.test_networks import make_network

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_an_address_handed_out_skips_one_a_later_nic_of_the_request_asks_for(client) -> None:
    network = make_network(client, subnet="10.14.0.0/24", start="10.14.0.10",
                           end="10.14.0.11", gateway="10.14.0.1")
    uuid = network["uuid"]
    created = create_vm(client, networks=[{"uuid": uuid}, {"uuid": uuid, "ip": "10.14.0.10"}])
    assert [n["ip"] for n in get_vm(client, created["vm_uuid"])["nics"]] == [
        "10.14.0.11", "10.14.0.10"]
    # add_nics alike, on a network of its own; an address spelt another way is the same one
    other = make_network(client, name="other", subnet="10.15.0.0/24", start="10.15.0.10",
                         end="10.15.0.11", gateway="10.15.0.1")
    running = create_running_vm(client)
    added = act(client, running, "add_nics", json={"networks": [
        {"ipv4_uuid": other["uuid"], "ipv4_count": 1},
        {"ipv4_uuid": other["uuid"], "ipv4_ips": ["10.15.0.10"]}]})
    assert added.status_code == 202, added.text
    assert [n["ip"] for n in get_vm(client, running)["nics"]] == ["10.15.0.11", "10.15.0.10"]
    # with no other address free, the NIC asking for none finds the network full
    third = make_network(client, name="third", subnet="10.16.0.0/24", start="10.16.0.10",
                         end="10.16.0.10", gateway="10.16.0.1")
    full = client.post("/vms", json=vm_body(networks=[
        {"uuid": third["uuid"]}, {"uuid": third["uuid"], "ip": "10.16.0.10"}]))
    body = assert_error(full, 409, "ValidationFailed")
    assert body["errors"][0]["message"] == f"network {third['uuid']} has no free address"


@SQLITE
@pytest.mark.parametrize("networks", ["{uuid},,", ",{uuid}", ["{uuid}", ""]])
def test_an_empty_network_name_is_a_malformed_list(client, services, networks) -> None:
    uuid = make_network(client)["uuid"]
    asked = (networks.format(uuid=uuid) if isinstance(networks, str)
             else [entry.format(uuid=uuid) for entry in networks])
    head = services.commands.head_position()
    body = assert_error(client.post("/vms", json=vm_body(networks=asked)), 409,
                        "ValidationFailed")
    assert body["errors"] == [{"field": "networks", "code": "Invalid",
                               "message": "Malformed networks object"}], body
    assert services.commands.head_position() == head


@SQLITE
@pytest.mark.parametrize(("extra", "message"), [
    ({"ipv4_ips": ["10.2.0.4"]}, "cannot specify both ip and ipv4_ips"),
    ({"ipv4_count": 1}, "cannot specify both ip and ipv4_count"),
])
def test_ip_beside_ipv4_ips_or_a_count_is_refused_not_dropped(client, services, extra,
                                                              message) -> None:
    uuid = make_network(client)["uuid"]
    running = create_running_vm(client)
    entry = {"uuid": uuid, "ip": "10.2.0.3", **extra}
    head = services.commands.head_position()
    for answer in (client.post("/vms", json=vm_body(networks=[entry])),
                   act(client, running, "add_nics", json={"networks": [entry]})):
        body = assert_error(answer, 409, "ValidationFailed")
        assert body["errors"] == [{"field": "networks", "code": "Invalid",
                                   "message": message}], body
    assert services.commands.head_position() == head


@SQLITE
@pytest.mark.parametrize(("entry", "message"), [
    ({"ip": "10.2.0.010"},
     "ip is not an IPv4 address (dotted decimal, without leading zeros)"),
    ({"ip": "10.2.0"}, "ip is not an IPv4 address (dotted decimal, without leading zeros)"),
    ({"ipv4_ips": ["10.2.0.010"]}, "ipv4_ips contains invalid IPv4 addresses"),
])
def test_a_bad_address_is_told_in_the_field_the_caller_sent(client, entry, message) -> None:
    uuid = make_network(client)["uuid"]
    key = "ipv4_uuid" if "ipv4_ips" in entry else "uuid"
    body = assert_error(client.post("/vms", json=vm_body(networks=[{key: uuid, **entry}])),
                        409, "ValidationFailed")
    assert body["errors"] == [{"field": "networks", "code": "Invalid", "message": message}]


@SQLITE
@pytest.mark.parametrize(("subnet", "start"), [("10.2.0.0/31", "10.2.0.0"),
                                               ("10.2.0.1/32", "10.2.0.1")])
def test_a_subnet_with_no_host_address_is_refused(client, subnet, start) -> None:
    answer = client.post("/networks", json={"name": "tiny", "subnet": subnet,
                                            "provision_start_ip": start,
                                            "provision_end_ip": start})
    body = assert_error(answer, 409, "ValidationFailed")
    assert error_fields(body) == {"subnet": "Invalid"}, body
    assert body["errors"][0]["message"].startswith("must be a /30 or larger")
    assert client.get("/networks").json() == []
    # a /30 holds two
    small = make_network(client, subnet="10.3.0.0/30", start="10.3.0.1", end="10.3.0.2",
                         gateway=None)
    assert small["addresses_total"] == 2
