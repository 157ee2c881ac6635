"""A volume's address on a vmledger network is claimed on that network, as a VM NIC's is
(api.md ``/volumes``; domain/network.py): found by a tester, POST /volumes took an address a
NIC held, ``add_nics`` took one a volume held, and the network's figures left volumes out.
A network vmledger does not know (an external one) has no claims to take."""

from __future__ import annotations

from tests.api.helpers import (
    act, assert_error, create_running_vm, create_vm, error_fields, get_vm, vm_body, wait_job,
)
from tests.api.test_networks import in_use, make_network

EXTERNAL = "5f3c7d2e-1111-4222-8333-444455556666"


def volume_on(client, network_uuid: str, ip: str):
    return client.post("/volumes", json={"name": "data", "networks": {network_uuid: ip}})


def test_a_volume_cannot_take_an_address_a_nic_holds_nor_a_nic_one_a_volume_holds(
        client, services) -> None:
    network = make_network(client)
    vm_uuid = create_running_vm(client, networks=[network["uuid"]])  # nothing else appends
    held = get_vm(client, vm_uuid)["nics"][0]["ip"]
    head = services.commands.head_position()
    body = assert_error(volume_on(client, network["uuid"], held), 409, "ValidationFailed")
    assert error_fields(body) == {"networks": "Duplicate"}, body
    assert services.commands.head_position() == head

    assert volume_on(client, network["uuid"], "10.2.0.4").status_code == 201
    running = create_running_vm(client)
    added = act(client, running, "add_nics",
                json={"networks": [{"ipv4_uuid": network["uuid"], "ipv4_ips": ["10.2.0.4"]}]})
    assert error_fields(assert_error(added, 409, "ValidationFailed")) == {
        "networks": "Duplicate"}
    # an address handed out automatically skips it too
    assert create_vm(client, networks=[network["uuid"]]).get("vm_uuid")
    assert in_use(client, network) == 3


def test_attach_claims_detach_releases_and_the_figures_count_volumes(client) -> None:
    network = make_network(client)
    volume = volume_on(client, EXTERNAL, "192.0.2.7").json()  # external: nothing to claim
    assert in_use(client, network) == 0
    attached = client.post(f"/volumes/{volume['uuid']}", params={"action": "attach_network"},
                           json={"network_uuid": network["uuid"], "address": "10.2.0.2"})
    assert attached.status_code in (200, 202), attached.text
    assert in_use(client, network) == 1
    taken = client.post("/vms", json=vm_body(
        networks=[{"ipv4_uuid": network["uuid"], "ipv4_ips": ["10.2.0.2"]}]))
    assert error_fields(assert_error(taken, 409, "ValidationFailed")) == {
        "networks": "Duplicate"}
    detached = client.post(f"/volumes/{volume['uuid']}", params={"action": "detach_network"},
                           json={"network_uuid": network["uuid"]})
    assert detached.status_code in (200, 202), detached.text
    assert in_use(client, network) == 0
    created = create_vm(client, networks=[{"uuid": network["uuid"], "ip": "10.2.0.2"}])
    assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"


def test_a_volume_claims_on_each_known_network_it_is_created_on_and_moving_it_moves_its_claim(
        client, services) -> None:
    first = make_network(client)
    second = client.post("/networks", json={
        "name": "second", "subnet": "10.3.0.0/28", "provision_start_ip": "10.3.0.2",
        "provision_end_ip": "10.3.0.5", "gateway": "10.3.0.1"}).json()
    created = client.post("/volumes", json={"name": "data", "networks": {
        second["uuid"]: "10.3.0.9", first["uuid"]: "10.2.0.9", EXTERNAL: "192.0.2.7"}})
    assert created.status_code == 201, created.text
    volume = created.json()["uuid"]
    claims = services.commands.load_network
    assert (claims(first["uuid"]).claims, claims(second["uuid"]).claims) == (
        {"10.2.0.9": volume}, {"10.3.0.9": volume})
    for action, body in (("detach_network", {"network_uuid": first["uuid"]}),
                         ("attach_network", {"network_uuid": first["uuid"],
                                             "address": "10.2.0.10"})):
        moved = client.post(f"/volumes/{volume}", params={"action": action}, json=body)
        assert moved.status_code in (200, 202), moved.text
    assert (claims(first["uuid"]).claims, claims(second["uuid"]).claims) == (
        {"10.2.0.10": volume}, {"10.3.0.9": volume})
