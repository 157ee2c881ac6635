"""The console's audit of damaged streams (auditor tester): it reports findings, as ``vmledger
audit verify`` does, for the streams it exists to check (it answered 500 or 503, and a fleet
page failed whole), and a fleet page reports each VM."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from domain.vm import Vm
from service.container import Services
from tests.api.helpers import act_and_wait, create_running_vm
from tests.tampering import delete_event, move_event, set_event_column, swap_versions


def _history_of(client: TestClient, vm_uuid: str) -> list[dict]:
    return client.get(f"/vms/{vm_uuid}/history").json()


def _damage(kind: str, services: Services, client: TestClient, vm_uuid: str,
            other: str) -> None:
    history = _history_of(client, vm_uuid)
    last = history[-1]["version"]
    if kind == "topic of another event class":
        set_event_column(services, vm_uuid, 2, "topic", Vm.Stopped.TOPIC
                         if history[1]["type"] != "Stopped" else Vm.Started.TOPIC)
    elif kind == "deleted":
        delete_event(services, vm_uuid, 3)
    elif kind == "swapped":
        swap_versions(services, vm_uuid, 3, last - 1)
    elif kind == "moved from another stream":
        move_event(services, other, 3, vm_uuid, last + 1)
    elif kind == "snapshot topic":
        set_event_column(services, vm_uuid, 3, "topic", "eventsourcing.domain:Snapshot")


KINDS = ["topic of another event class", "deleted", "swapped", "moved from another stream",
         "snapshot topic"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_console_audit_reports_a_damaged_stream(services: Services, client: TestClient,
                                                   kind: str) -> None:
    other = create_running_vm(client)
    vm_uuid = create_running_vm(client)
    for alias in ("a", "b"):
        act_and_wait(client, vm_uuid, "update", json={"alias": alias})
    _damage(kind, services, client, vm_uuid, other)
    one = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid})
    assert one.status_code == 200, one.text
    assert 'data-failed="1"' in one.text
    assert f"stream {vm_uuid} version " in one.text
    fleet = client.post("/console/fragments/audit", params={"after": 0, "limit": 50})
    assert fleet.status_code == 200, fleet.text
    assert set(re.findall(r'<tr data-vm="([^"]+)"', fleet.text)) >= {vm_uuid, other}


def test_the_console_names_the_swapped_rows_only(services: Services,
                                                client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    for alias in ("a", "b"):
        act_and_wait(client, vm_uuid, "update", json={"alias": alias})
    last = _history_of(client, vm_uuid)[-1]["version"]
    swap_versions(services, vm_uuid, 3, last - 1)
    text = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text
    assert f"tampered: stream {vm_uuid} version 3:" in text
    assert f"tampered: stream {vm_uuid} version {last - 1}:" in text
    # no such finding (the fold's gap message may say "or stored out of order")
    assert "out of order:" not in text and "missing:" not in text
