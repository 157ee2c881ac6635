"""Refusals that say what the value must be, not how long pydantic wanted its text (a
tester's list): a network's ``subnet`` and ``gateway``, a volume's ``mountpoint``, a
``remove_nics`` MAC that is no MAC, and an opaque ListVms marker made for the request's sort
whose value is not one that sort has (it was a bare "Invalid marker")."""

from __future__ import annotations

import pytest

from projections.vm_markers import encode_marker
from tests.api.helpers import act, assert_error, create_running_vm, error_fields

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

NETWORK = {"name": "n", "subnet": "10.9.0.0/24", "provision_start_ip": "10.9.0.10",
           "provision_end_ip": "10.9.0.20", "gateway": "10.9.0.1"}
VM = "930896af-bf8c-48d4-885c-6573a94b1853"


def _message(response, field: str) -> str:
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {field: "Invalid"}, body
    return body["errors"][0]["message"]


@pytest.mark.parametrize("field, value, said", [
    ("subnet", "garbage", "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    ("subnet", "10.9.0.0/24" * 3, "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    ("subnet", "10.9.0.0/33", "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    # a prefix length with a leading zero, as an address with one is refused (a tester's
    # /024 was stored as a /24), and a netmask or host mask where CIDR has the length
    ("subnet", "10.9.0.0/024", "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    ("subnet", "10.9.0.0/00", "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    ("subnet", "10.9.0.0/255.255.255.0", "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    ("subnet", "10.9.0.0/0.0.0.255", "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    ("subnet", "010.9.0.0/24", "must be an IPv4 CIDR, e.g. 10.0.0.0/24"),
    ("gateway", "bad", "must be an IPv4 address"),
    ("gateway", "10.9.0.1" * 3, "must be an IPv4 address"),
    ("gateway", "10.9.0.300", "must be an IPv4 address"),
    ("provision_start_ip", "bad", "must be an IPv4 address"),
    ("provision_start_ip", "10.9.0.1" * 3, "must be an IPv4 address"),
    ("provision_end_ip", "bad", "must be an IPv4 address"),
])
def test_a_bad_subnet_or_address_says_what_it_must_be_whatever_its_length(
        client, field, value, said) -> None:
    assert _message(client.post("/networks", json={**NETWORK, field: value}), field) == said
    assert client.get("/networks").json() == []


@pytest.mark.parametrize("mountpoint", ["/", "", "data", "/" + "a" * 300, "/a b"])
def test_a_bad_mountpoint_says_what_a_mountpoint_must_be(client, mountpoint) -> None:
    volumes = [{"volume_uuid": VM, "mountpoint": mountpoint}]
    response = client.post("/vms", json={"owner_uuid": VM, "brand": "joyent", "ram": 256,
                                         "volumes": volumes})
    body = assert_error(response, 409, "ValidationFailed")
    [error] = body["errors"]
    assert error["field"] == "volumes.0.mountpoint", body
    assert error["message"].startswith("must be an absolute path below /"), body
    assert "characters" in error["message"] and "String should" not in error["message"]


def test_a_remove_nics_mac_that_is_no_mac_address_says_so(client, services) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    refused = act(client, vm_uuid, "remove_nics", json={"macs": ["zz:zz"]})
    message = _message(refused, "macs")
    assert message == "not a MAC address: zz:zz (six pairs of hex digits, as 90:b8:d0:c0:ff:ee)"
    unknown = act(client, vm_uuid, "remove_nics", json={"macs": ["90:b8:d0:c0:ff:ee"]})
    assert _message(unknown, "macs") == "the VM has no NIC 90:b8:d0:c0:ff:ee"
    assert services.commands.head_position() == head


@pytest.mark.parametrize("sort, value, uuid, reason", [
    ("ram.asc", "abc", VM, 'Marker has an invalid ram field: "abc" (expected an integer)'),
    ("alias.asc", 7, VM, "Marker has an invalid alias field: 7 (expected a string)"),
    ("ram.asc", -1, VM, "Marker has an invalid ram field: -1 (no VM's ram sorts as that)"),
    ("state.asc", "asleep", VM,
     "Marker has an invalid state field: \"asleep\" (no VM's state sorts as that)"),
    ("alias.asc", "a\u0000", VM, "Marker has an invalid value: alias: strings may not contain"),
    ("ram.asc", 1, VM.upper(),
     f'Marker has an invalid uuid field: "{VM.upper()}" (expected a lowercase uuid)'),
])
def test_a_marker_made_for_the_sort_with_a_value_it_cannot_have_says_why(
        client, sort, value, uuid, reason) -> None:
    marker = encode_marker(sort, value, uuid)
    message = _message(client.get("/vms", params={"sort": sort, "marker": marker}), "marker")
    assert message.startswith(f"Invalid marker: {marker}. {reason}"), message
