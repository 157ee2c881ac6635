"""A volume's address on a network vmledger did not know yet is claimed when a network is
created with that uuid (api.md ``/volumes``; domain/network_external.py). Found by a tester:
a volume on an "external" network, which claimed nothing, and ``POST /networks`` with that
uuid later handed the volume's address to a VM's NIC."""

from __future__ import annotations

import pytest
from eventsourcing.persistence import IntegrityError

from domain.network_external import ExternalNetwork, external_id
from domain.vm import make_cause
from service.audit.read_models import verify_read_models
from service.audit.verify import verify_chains
from service.changes.records import ChangeFolder
from tests.api.helpers import assert_error, create_vm, error_fields, get_vm, vm_body

LATER = "5f3c7d2e-1111-4222-8333-444455550088"


def network_later(client, **overrides):
    return client.post("/networks", json={
        "uuid": LATER, "name": "later", "subnet": "10.88.0.0/24",
        "provision_start_ip": "10.88.0.10", "provision_end_ip": "10.88.0.20", **overrides})


def volume_on(client, address: str, name: str = "ext") -> str:
    created = client.post("/volumes", json={"name": name, "networks": {LATER: address}})
    assert created.status_code == 201, created.text
    return created.json()["uuid"]


def test_creating_a_network_claims_the_addresses_volumes_have_on_its_uuid(
        client, services) -> None:
    volume = volume_on(client, "10.88.0.10")
    created = network_later(client)
    assert created.status_code == 201, created.text
    assert created.json()["addresses_in_use"] == 1
    assert client.get(f"/networks/{LATER}").json()["addresses_in_use"] == 1
    assert services.commands.load_network(LATER).claims == {"10.88.0.10": volume}
    vm = create_vm(client, networks=[LATER])
    assert [nic["ip"] for nic in get_vm(client, vm["vm_uuid"])["nics"]] == ["10.88.0.11"]
    taken = client.post("/vms", json=vm_body(networks=[{"uuid": LATER, "ip": "10.88.0.10"}]))
    assert error_fields(assert_error(taken, 409, "ValidationFailed")) == {
        "networks": "Duplicate"}
    # once the network exists, the volume's detach releases its claim there
    detached = client.post(f"/volumes/{volume}", params={"action": "detach_network"},
                           json={"network_uuid": LATER})
    assert detached.status_code == 202, detached.text
    assert services.commands.load_network(LATER).claims == {"10.88.0.11": vm["vm_uuid"]}
    # the new stream's events are audited, and told in the changefeed, as every other's
    client.get(f"/networks/{LATER}")  # (once the read models have every event)
    assert verify_chains(services.app) == []
    assert verify_read_models(services) == []
    changes = ChangeFolder(services.app).fold(
        services.app.recorder.select_notifications(1, 1000))
    assert [c.type for c in changes if c.kind == "external_network"] == [
        "Created", "VolumeAddressNoted", "Adopted"]


def test_a_volume_detached_before_the_network_exists_leaves_nothing_claimed(
        client, services) -> None:
    volume = volume_on(client, "10.88.0.10")
    detached = client.post(f"/volumes/{volume}", params={"action": "detach_network"},
                           json={"network_uuid": LATER})
    assert detached.status_code == 202, detached.text
    assert network_later(client).json()["addresses_in_use"] == 0
    assert services.commands.load_network(LATER).claims == {}


def test_a_network_that_cannot_hold_a_volumes_address_on_its_uuid_is_refused(
        client, services) -> None:
    outside = volume_on(client, "192.0.2.7")
    head = services.commands.head_position()
    body = assert_error(network_later(client), 409, "ValidationFailed")
    assert error_fields(body) == {"uuid": "Invalid"}, body
    message = body["errors"][0]["message"]
    assert outside in message and "192.0.2.7 is not a host address of 10.88.0.0/24" in message
    assert services.commands.head_position() == head  # nothing stored
    assert_error(client.get(f"/networks/{LATER}"), 404, "ResourceNotFound")
    # two volumes at one address: the network could give it to only one of them
    client.post(f"/volumes/{outside}", params={"action": "detach_network"},
                json={"network_uuid": LATER})
    volume_on(client, "10.88.0.30", name="a")
    volume_on(client, "10.88.0.30", name="b")
    assert error_fields(assert_error(network_later(client), 409, "ValidationFailed")) == {
        "uuid": "Duplicate"}
    # the gateway too
    gateway = assert_error(network_later(client, gateway="10.88.0.30"), 409,
                           "ValidationFailed")
    assert error_fields(gateway) == {"uuid": "Invalid"}
    assert "10.88.0.30 is the gateway" in gateway["errors"][0]["message"]


@pytest.mark.parametrize("window", ["_known_network", "_external"])
def test_an_attach_racing_the_networks_create_claims_on_the_network(
        client, services, window) -> None:
    """The attach finds no network; the network is created before the attach saves, either
    before the attach reads the ExternalNetwork stream (it finds it adopted) or after (the
    two meet on that stream's version: the attach conflicts and decides again). Either way
    the attach claims its address on the network."""
    volume = client.post("/volumes", json={"name": "racer"}).json()["uuid"]
    commands = services.commands
    step = getattr(commands, window)
    raced: list[bool] = []

    def create_in_between(*args, **kwargs):
        found = step(*args, **kwargs)
        if not raced and commands._fold_any(LATER) is None:
            raced.append(True)
            commands.create_network(
                name="later", subnet="10.88.0.0/24", provision_start_ip="10.88.0.10",
                provision_end_ip="10.88.0.20", gateway=None, cause=make_cause("other"),
                network_uuid=LATER)
        return found

    setattr(commands, window, create_in_between)
    conflicts: list[int] = []
    save = commands.save

    def counted_save(*aggregates, **kwargs):
        try:
            return save(*aggregates, **kwargs)
        except IntegrityError:
            conflicts.append(1)
            raise

    commands.save = counted_save
    try:
        attached = client.post(f"/volumes/{volume}", params={"action": "attach_network"},
                               json={"network_uuid": LATER, "address": "10.88.0.10"})
    finally:
        delattr(commands, window)
        del commands.save
    assert attached.status_code == 202, attached.text
    assert raced == [True]
    assert len(conflicts) == (1 if window == "_external" else 0)
    assert commands.load_network(LATER).claims == {"10.88.0.10": volume}
    external = commands.load_aggregate(ExternalNetwork, external_id(LATER))
    assert external.adopted and external.addresses == {}
