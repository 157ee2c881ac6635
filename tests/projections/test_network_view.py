"""``network_view``'s address figures count the provisioning range only, live and rebuilt
alike (api.md "Networks and NICs"); a batch encodes each network's row once; a failed
provision's addresses are free, live and rebuilt alike."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

from domain.network import Network, range_counts
from projections import network_view
from projections.network_view import NetworkQueries
from projections.vm_queries import VmQueries
from service.commands.networks import NicRequest
from tests.builders import cause, create, read_model_tables, rows, settle


def figures(services, network_uuid: str) -> tuple[int, int, int, int]:
    found = NetworkQueries(services.db).get(network_uuid)
    return (found["addresses_total"], found["addresses_in_use"], found["addresses_free"],
            found["addresses_outside_range"])


def test_claims_outside_the_range_never_make_the_free_count_negative(services) -> None:
    network_uuid = uuid.uuid4()
    net = Network.create(network_uuid=network_uuid, name="n", subnet="10.9.0.0/24",
                         provision_start_ip="10.9.0.10", provision_end_ip="10.9.0.11",
                         gateway=None, cause=cause())
    for ip in ("10.9.0.200", "10.9.0.201", "10.9.0.10", "10.9.0.11"):
        net.claim(ip, vm_uuid=f"vm-{ip}", mac="02:00:00:00:00:01", cause=cause())
    net.release("10.9.0.201", vm_uuid="vm-10.9.0.201", cause=cause())
    net.release("10.9.0.11", vm_uuid="vm-10.9.0.11", cause=cause())
    services.app.save(net)
    services.projections.catch_up()
    live = figures(services, str(network_uuid))
    assert live == (2, 1, 1, 1)
    in_use, outside = range_counts(net.provision_start_ip, net.provision_end_ip, net.claims)
    assert live == (net.size, in_use, net.size - in_use, outside)
    table = rows(services, "network_view")
    services.projections.reset(["network_view"])
    services.projections.batch_size = 1  # one event a batch
    services.projections.catch_up(["network_view"])
    assert figures(services, str(network_uuid)) == live and rows(services, "network_view") == table
    services.projections.rebuild(["network_view"])
    assert figures(services, str(network_uuid)) == live and rows(services, "network_view") == table


def test_a_row_written_before_the_outside_count_reads_right_and_heals_on_its_next_event(
        services) -> None:
    net = Network.create(network_uuid=uuid.uuid4(), name="old", subnet="10.9.1.0/24",
                         provision_start_ip="10.9.1.10", provision_end_ip="10.9.1.10",
                         gateway=None, cause=cause())
    net.claim("10.9.1.10", vm_uuid="a", mac="02:00:00:00:00:01", cause=cause())
    net.claim("10.9.1.99", vm_uuid="b", mac="02:00:00:00:00:02", cause=cause())
    services.app.save(net)
    services.projections.catch_up()
    row = rows(services, "network_view")[0]
    body = json.loads(row["body"])
    body.pop("addresses_outside_range")
    with services.db.transaction() as tx:  # as the row was written: every claim in ``used``
        tx.execute("UPDATE network_view SET used = 2, body = ?", (json.dumps(body),))
    assert figures(services, str(net.id)) == (1, 1, 0, 1)
    net.release("10.9.1.99", vm_uuid="b", cause=cause())
    services.app.save(net)
    services.projections.catch_up()
    assert figures(services, str(net.id)) == (1, 1, 0, 0)
    assert rows(services, "network_view")[0]["used"] == 1


def test_a_batch_of_claims_on_one_network_encodes_its_row_once(services, monkeypatch) -> None:
    net = Network.create(network_uuid=uuid.uuid4(), name="busy", subnet="10.9.2.0/24",
                         provision_start_ip="10.9.2.10", provision_end_ip="10.9.2.200",
                         gateway=None, cause=cause())
    services.app.save(net)
    services.projections.catch_up()
    for index in range(40):
        net.claim(f"10.9.2.{10 + index}", vm_uuid=f"vm-{index}", mac="02:00:00:00:00:01",
                  cause=cause())
    net.release("10.9.2.10", vm_uuid="vm-0", cause=cause())
    services.app.save(net)
    encoded: list[str] = []

    def counted_dumps(value, *args, **kwargs):
        text = json.dumps(value, *args, **kwargs)
        encoded.append(text)
        return text

    monkeypatch.setattr(network_view, "json", SimpleNamespace(loads=json.loads,
                                                              dumps=counted_dumps))
    services.projections.catch_up()
    assert len(encoded) == 2  # the body and the claims, once for the 41 events
    assert figures(services, str(net.id)) == (191, 39, 152, 0)


def test_a_failed_provisions_addresses_are_free_live_and_rebuilt_alike(services) -> None:
    # VMAPI TRITON-394: the VM gives its NICs back with ProvisionFailed; network_view frees
    # the addresses and vm_view shows no NIC, and a rebuild from the log gives the same rows.
    network, _ = services.commands.create_network(
        name="fp", subnet="10.60.0.0/24", provision_start_ip="10.60.0.10",
        provision_end_ip="10.60.0.11", gateway=None, cause=cause())
    asked = (NicRequest(str(network.id)),)
    failed = [create(services, networks=asked,
                     internal_metadata={"force_provision_failure": True}).vm_uuid
              for _ in range(2)]
    settle(services)
    kept = create(services, networks=asked).vm_uuid
    settle(services)
    assert figures(services, str(network.id)) == (2, 1, 1, 0)
    assert [VmQueries(services.db).get(vm_uuid)["nics"] for vm_uuid in failed] == [[], []]
    assert [n["ip"] for n in VmQueries(services.db).get(kept)["nics"]] == ["10.60.0.10"]
    live = read_model_tables(services)
    services.projections.rebuild(["network_view", "vm_view"])
    assert read_model_tables(services) == live
