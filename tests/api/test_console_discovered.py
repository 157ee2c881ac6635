"""A VM its agent found (``PUT /vms/{uuid}``, recorded as ``Discovered``, not ``Created``) is a
VM like any other to the console: the fleet's audit verifies it, and its timeline draws its
first event as the state it entered. (Found by a tester of the console: the chart counted such
a VM as entering ``provisioning``; the audit's pages and the timeline knew only ``Created``.)"""

from __future__ import annotations

import re
import uuid

from fastapi.testclient import TestClient

from service.audit.streams import fleet_page
from service.console.render import event_kind
from service.container import Services
from tests.api.helpers import OWNER, create_running_vm


def found(client: TestClient, state: str = "running") -> str:
    """A VM its agent reports, which the log never had: its uuid."""
    vm_uuid = str(uuid.uuid4())
    response = client.put(f"/vms/{vm_uuid}", json={
        "uuid": vm_uuid, "owner_uuid": OWNER, "brand": "bhyve", "ram": 128, "state": state})
    assert response.status_code == 200, response.text
    return vm_uuid


def test_the_fleet_audit_verifies_a_vm_its_agent_found(services: Services,
                                                       client: TestClient) -> None:
    # it read only the log's "vm.created" notifications: a found VM was never verified
    made = create_running_vm(client)
    discovered = found(client)
    audits, after = fleet_page(services, limit=10)
    assert [a.vm_uuid for a in audits] == [made, discovered] and after is None
    assert all(a.ok for a in audits)
    html = client.post("/console/fragments/audit", params={"limit": 10}).text
    assert re.findall(r'<tr data-vm="([^"]+)"', html) == [made, discovered]


def test_a_found_vms_first_event_is_drawn_as_a_state_change(client: TestClient) -> None:
    assert event_kind("Discovered") == event_kind("Created") == "state"
    vm_uuid = found(client, "stopped")
    page = client.get(f"/console/fragments/vms/{vm_uuid}").text
    assert '<li class="kind-state" data-version="1" data-type="Discovered">' in page
