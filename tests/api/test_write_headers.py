"""Every route that appends to the log answers the log position of its last event in
``x-log-position``, and every answer that is a versioned object carries its version as
``ETag`` (docs/api.md, "Commands" and "Contract: concurrency and idempotency"). A tester found
``POST /servers``, the server actions, the agents' reports without the position, and the
network answers without ``ETag``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from service.container import Services
from tests.api.helpers import create_running_vm, get_vm, vm_body

SERVER = {"hostname": "cn-headers", "ram_mib": 65536, "cpus": 16}
NETWORK = {"name": "headers", "subnet": "10.77.0.0/24", "provision_start_ip": "10.77.0.10",
           "provision_end_ip": "10.77.0.200"}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _server(http: TestClient) -> str:
    registered = http.post("/servers", json={**SERVER, "uuid": str(uuid.uuid4())})
    assert registered.status_code == 201, registered.text
    return registered.json()["uuid"]


def _network(http: TestClient) -> str:
    created = http.post("/networks", json=NETWORK)
    assert created.status_code == 201, created.text
    return created.json()["uuid"]


def _volume(http: TestClient) -> str:
    created = http.post("/volumes", json={"name": "headers"})
    assert created.status_code == 201, created.text
    return created.json()["uuid"]


def _running(http: TestClient) -> dict:
    return get_vm(http, create_running_vm(http))


def _quarantined(http: TestClient) -> str:
    vm_uuid = create_running_vm(http)
    quarantined = http.post(f"/vms/{vm_uuid}", params={"action": "quarantine"},
                            json={"reason": "headers"})
    assert quarantined.status_code == 200, quarantined.text
    return vm_uuid


def _generation_report(http: TestClient, services: Services) -> Response:
    vm = _running(http)
    sent = services.fleet.report(vm["server_uuid"])
    return http.put(f"/vms/{vm['uuid']}", json={
        "state": "stopped", "server_uuid": vm["server_uuid"], "boot_id": sent["boot_id"],
        "generation": sent["generation"]})


def _inventory(http: TestClient, services: Services) -> Response:
    vm = _running(http)
    sent = services.fleet.report(vm["server_uuid"])
    return http.put("/vms", params={"server_uuid": vm["server_uuid"]}, json={
        "boot_id": sent["boot_id"], "generation": sent["generation"],
        "vms": {vm["uuid"]: {"state": "stopped"}}})


def _vm_agent_report(http: TestClient, _services: Services) -> Response:
    vm = _running(http)
    return http.put(f"/vms/{vm['uuid']}", json={
        "uuid": vm["uuid"], "state": "stopped", "server_uuid": vm["server_uuid"],
        "last_modified": _now()})


def _simulated_report(http: TestClient, _services: Services) -> Response:
    vm = _running(http)
    shut = http.post(f"/sim/vms/{vm['uuid']}", params={"action": "shutdown"})
    assert shut.status_code == 200, shut.text
    return http.post(f"/sim/servers/{vm['server_uuid']}", params={"action": "report"})


def _vm_found(http: TestClient, _services: Services) -> Response:
    vm_uuid = str(uuid.uuid4())
    return http.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, "state": "running"})


# route -> (what sends it, given the client and the services; its status). Each appends.
APPENDING: dict[str, tuple[Callable[[TestClient, Services], Response], int]] = {
    "POST /vms": (lambda h, s: h.post("/vms", json=vm_body()), 202),
    "POST /vms/{uuid}?action=stop": (lambda h, s: h.post(
        f"/vms/{create_running_vm(h)}", params={"action": "stop"}), 202),
    "POST /vms/{uuid}?action=quarantine": (lambda h, s: h.post(
        f"/vms/{create_running_vm(h)}", params={"action": "quarantine"},
        json={"reason": "r"}), 200),
    "POST /vms/{uuid}?action=release": (lambda h, s: h.post(
        f"/vms/{_quarantined(h)}", params={"action": "release"}), 200),
    "DELETE /vms/{uuid}": (lambda h, s: h.delete(f"/vms/{create_running_vm(h)}"), 202),
    "PUT /vms/{uuid} (generation)": (_generation_report, 200),
    "PUT /vms/{uuid} (vm-agent, known)": (_vm_agent_report, 200),
    "PUT /vms/{uuid} (vm-agent, found)": (_vm_found, 200),
    "PUT /vms": (_inventory, 200),
    "POST /sim/servers/{uuid}?action=report": (_simulated_report, 200),
    "POST /servers": (lambda h, s: h.post("/servers", json=SERVER), 201),
    "POST /servers/{uuid}?action=reboot": (lambda h, s: h.post(
        f"/servers/{_server(h)}", params={"action": "reboot"}), 202),
    "POST /servers/{uuid}?action=remove": (lambda h, s: h.post(
        f"/servers/{_server(h)}", params={"action": "remove"}), 200),
    "POST /networks": (lambda h, s: h.post("/networks", json=NETWORK), 201),
    "POST /volumes": (lambda h, s: h.post("/volumes", json={"name": "v"}), 201),
    "POST /volumes/{uuid}?action=attach_network": (lambda h, s: h.post(
        f"/volumes/{_volume(h)}", params={"action": "attach_network"},
        json={"network_uuid": _network(h), "address": "10.77.0.5"}), 202),
}


@pytest.mark.parametrize("route", list(APPENDING))
def test_every_appending_route_answers_its_log_position_and_its_objects_etag(
        client: TestClient, services: Services, route: str) -> None:
    send, status = APPENDING[route]
    response = send(client, services)
    assert response.status_code == status, response.text
    position = int(response.headers["x-log-position"])
    # the position of an event this request appended: a job the worker runs may append
    # after it, but the log holds it
    notifications = services.app.recorder.select_notifications(position, 1)
    assert notifications and notifications[0].id == position
    event = services.app.mapper.to_domain_event(notifications[0])
    assert event.cause["request_id"] == response.headers["x-request-id"]
    body = response.json()
    if "version" in body:  # the object answered: its version
        assert response.headers["etag"] == f'"{body["version"]}"'
    elif "job_uuid" in body:  # an accepted VM command: the VM's version after it
        assert str(event.originator_id) == body["vm_uuid"]
        assert response.headers["etag"] == f'"{event.originator_version}"'


# route -> the path of a versioned object it answers, made by ``make``
VERSIONED: dict[str, Callable[[TestClient], str]] = {
    "GET /vms/{uuid}": lambda h: f"/vms/{create_running_vm(h)}",
    "GET /servers/{uuid}": lambda h: f"/servers/{_server(h)}",
    "GET /volumes/{uuid}": lambda h: f"/volumes/{_volume(h)}",
    "GET /networks/{uuid}": lambda h: f"/networks/{_network(h)}",
}


@pytest.mark.parametrize("route", list(VERSIONED))
def test_every_versioned_object_read_answers_its_version_as_etag(
        client: TestClient, route: str) -> None:
    path = VERSIONED[route](client)
    for response in (client.get(path), client.head(path)):
        assert response.status_code == 200, response.text
    got = client.get(path)
    assert got.headers["etag"] == f'"{got.json()["version"]}"'
    assert client.head(path).headers["etag"] == got.headers["etag"]
