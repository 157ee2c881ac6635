"""A command whose change is recorded answers it whether or not the projector keeps up
(api.md, "Commands and the projector"). Found by a tester: with ``vmledger project`` stopped,
``?action=quarantine`` and ``release`` appended their event, then answered a bare
``503 read models did not reach position N`` (and a retried release was ``409``); the server,
volume and network commands, and an agent's report, waited on their read models the same
way. Each answers now from the saved aggregate, rendered as the read model renders it: the
body is what the GET gives once the projector catches up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from tests.api.conformance import conforming
from tests.api.helpers import OWNER, vm_body


@pytest.fixture
def stalled(services) -> Iterator[TestClient]:
    """The API with neither the projection runner nor the job worker running, and reads that
    give up on the read models after 0.2 s."""
    services.settings.read_timeout_s = 0.2
    with conforming(TestClient(create_app(services=services, background=False))) as http:
        yield http


def _etag(response) -> int:
    return int(response.headers["ETag"].strip('"'))


def test_quarantine_and_release_answer_the_vm_while_the_projector_is_stopped(
        stalled, services) -> None:
    created = stalled.post("/vms", json=vm_body())
    assert created.status_code == 202, created.text
    vm_uuid = created.json()["vm_uuid"]
    assert stalled.get(f"/vms/{vm_uuid}").status_code == 503  # the read model lags

    quarantined = stalled.post(f"/vms/{vm_uuid}", params={"action": "quarantine"},
                               json={"reason": "looking"})
    assert quarantined.status_code == 200, quarantined.text
    body = quarantined.json()
    assert (body["state"], body["quarantine"]["reason"]) == ("quarantined", "looking")
    assert _etag(quarantined) == body["version"]
    assert int(quarantined.headers["x-log-position"]) == services.commands.head_position()
    # the VM as it was at that version, folded from the log, is the same object
    assert stalled.get(f"/vms/{vm_uuid}", params={"version": body["version"]}).json() == body

    released = stalled.post(f"/vms/{vm_uuid}", params={"action": "release"}, json={})
    assert released.status_code == 200, released.text
    assert released.json()["state"] == "provisioning"
    assert released.json()["version"] > body["version"]

    services.projections.catch_up()
    assert stalled.get(f"/vms/{vm_uuid}").json() == released.json()


def test_an_agent_report_answers_the_vm_while_the_projector_is_stopped(
        stalled, services) -> None:
    vm_uuid = str(uuid.uuid4())
    found = stalled.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, "state": "running",
                                                 "owner_uuid": OWNER, "alias": "found"})
    assert found.status_code == 200, found.text
    assert (found.json()["uuid"], found.json()["state"]) == (vm_uuid, "running")
    services.projections.catch_up()
    assert stalled.get(f"/vms/{vm_uuid}").json() == found.json()


def test_server_commands_answer_the_server_while_the_projector_is_stopped(
        stalled, services) -> None:
    server_uuid = str(uuid.uuid4())
    created = stalled.post("/servers", json={"uuid": server_uuid, "hostname": "cn-lag",
                                             "ram_mib": 4096, "cpus": 8})
    assert created.status_code == 201, created.text
    assert created.json()["ram_free_mib"] == 4096 and created.json()["vm_count"] == 0
    assert _etag(created) == created.json()["version"]
    services.projections.catch_up()
    assert stalled.get(f"/servers/{server_uuid}").json() == created.json()

    rebooted = stalled.post(f"/servers/{server_uuid}", params={"action": "reboot"},
                            json={"boot_id": "b2"})
    assert rebooted.status_code == 202, rebooted.text
    assert rebooted.json()["boot_id"] == "b2"
    removed = stalled.post(f"/servers/{server_uuid}", params={"action": "remove"}, json={})
    assert removed.status_code == 200, removed.text
    assert removed.json()["status"] == "removed"
    services.projections.catch_up()
    assert stalled.get(f"/servers/{server_uuid}").json() == removed.json()


def test_network_and_volume_commands_answer_while_the_projector_is_stopped(
        stalled, services) -> None:
    network = stalled.post("/networks", json={
        "name": "lag", "subnet": "10.9.0.0/24", "provision_start_ip": "10.9.0.10",
        "provision_end_ip": "10.9.0.20", "gateway": "10.9.0.1"})
    assert network.status_code == 201, network.text
    network_uuid = network.json()["uuid"]
    assert network.json()["addresses_free"] == 11
    services.projections.catch_up()
    assert stalled.get(f"/networks/{network_uuid}").json() == network.json()

    volume = stalled.post("/volumes", json={"name": "data"})
    assert volume.status_code == 201, volume.text
    volume_uuid = volume.json()["uuid"]
    attached = stalled.post(f"/volumes/{volume_uuid}", params={"action": "attach_network"},
                            json={"network_uuid": network_uuid, "address": "10.9.0.30"})
    assert attached.status_code == 202, attached.text
    assert attached.json()["address"] == "10.9.0.30"
    assert _etag(attached) == attached.json()["version"]
    services.projections.catch_up()
    assert stalled.get(f"/volumes/{volume_uuid}").json() == attached.json()
    detached = stalled.post(f"/volumes/{volume_uuid}", params={"action": "detach_network"},
                            json={"network_uuid": network_uuid})
    assert detached.status_code == 202, detached.text
    assert detached.json()["networks"] == {}
    services.projections.catch_up()
    assert stalled.get(f"/volumes/{volume_uuid}").json() == detached.json()


def test_a_vm_on_a_network_given_by_uuid_needs_no_projector(stalled, services) -> None:
    # the network is found and its address claimed on its own stream, not in network_view
    network = stalled.post("/networks", json={
        "name": "by-uuid", "subnet": "10.8.0.0/24", "provision_start_ip": "10.8.0.10",
        "provision_end_ip": "10.8.0.20"}).json()
    created = stalled.post("/vms", json=vm_body(networks=[network["uuid"]]))
    assert created.status_code == 202, created.text
    added = stalled.post(f"/vms/{created.json()['vm_uuid']}", params={"action": "add_nics"},
                         json={"networks": [network["uuid"]]})
    # decided (a provisioning VM takes no NICs yet), not a 503 waiting for network_view
    assert added.json()["code"] == "UnallocatedVM", added.text
    assert added.json()["allowed_actions"] == ["quarantine"], added.text


def test_a_network_given_by_name_waits_for_the_projector_and_its_503_says_nothing_was_appended(
        stalled, services) -> None:
    # network_view is the only index of names: a name cannot be resolved while it lags
    stalled.post("/networks", json={
        "name": "by-name", "subnet": "10.7.0.0/24", "provision_start_ip": "10.7.0.10",
        "provision_end_ip": "10.7.0.20"})
    head = services.commands.head_position()
    refused = stalled.post("/vms", json=vm_body(networks=[{"name": "by-name"}]))
    assert refused.status_code == 503
    assert refused.json()["message"].endswith("; nothing was appended: retry the command")
    assert services.commands.head_position() == head
    services.projections.catch_up()
    assert stalled.post("/vms", json=vm_body(networks=[{"name": "by-name"}])).status_code == 202
