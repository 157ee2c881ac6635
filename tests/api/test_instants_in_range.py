"""Every instant a client gives is one the service can write back in UTC (api.md, "Errors"):
found by a tester, a vm-agent report dated ``9999-12-31T23:59:59-01:00`` (a valid aware
datetime, but in year 10000 once in UTC) was stored, and from then on the VM's history, the
console's VM page, ``/changes``, the Triton changefeed and ``vmledger history`` failed with
``OverflowError``, for good. Such an instant is refused where it comes in, a report dated
far ahead of the service's clock too (it would make every later real report "not newer"),
and one already in the log is written as the nearest instant UTC can carry."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from domain.vm import make_cause
from service.changes.records import ChangeFolder
from service.commands.vm_agent import AgentVm, AgentVmReports
from tests.api.helpers import (
    V2, assert_error, create_running_vm, create_vm, error_fields, get_vm, history_types,
)

BEYOND_UTC = {"after year 9999": "9999-12-31T23:59:59-01:00",
              "before year 1": "0001-01-01T00:00:00+00:01"}


@pytest.mark.parametrize("stamp", BEYOND_UTC.values(), ids=BEYOND_UTC.keys())
def test_a_vm_agent_report_dated_beyond_utc_is_refused_naming_last_modified(
        client, services, stamp) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    head = services.commands.head_position()
    report = {"uuid": vm_uuid, "state": "stopped", "server_uuid": server,
              "last_modified": stamp}
    body = assert_error(client.put(f"/vms/{vm_uuid}", json=report), 409, "ValidationFailed")
    assert error_fields(body) == {"last_modified": "Invalid"}, body
    assert_error(client.put(f"/vms/{vm_uuid}", json=report, headers=V2), 422,
                 "ValidationFailed")
    found = str(uuid.uuid4())  # a VM the log never had is not recorded either
    assert_error(client.put(f"/vms/{found}", json={**report, "uuid": found}), 409,
                 "ValidationFailed")
    assert services.commands.head_position() == head


def test_a_vm_agent_report_dated_far_ahead_of_the_clock_is_refused(client, services) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    ahead = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    response = client.put(f"/vms/{vm_uuid}", json={
        "uuid": vm_uuid, "state": "stopped", "server_uuid": server, "last_modified": ahead})
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {"last_modified": "Invalid"}, body
    assert "ahead" in body["errors"][0]["message"], body
    # a report a little ahead (clocks differ a little) is still applied
    soon = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    applied = client.put(f"/vms/{vm_uuid}", json={
        "uuid": vm_uuid, "state": "stopped", "server_uuid": server, "last_modified": soon})
    assert applied.json()["state"] == "stopped", applied.text


@pytest.mark.parametrize("stamp", BEYOND_UTC.values(), ids=BEYOND_UTC.keys())
def test_query_instants_beyond_utc_are_refused_naming_the_parameter(client, stamp) -> None:
    vm_uuid = create_vm(client)["vm_uuid"]
    body = assert_error(client.get(f"/vms/{vm_uuid}", params={"at": stamp}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"at": "Invalid"}, body
    body = assert_error(client.get("/vms", params={"create_timestamp": stamp}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"create_timestamp": "Invalid"}, body
    marker = f'{{"uuid": "{vm_uuid}", "create_timestamp": "{stamp}"}}'
    body = assert_error(client.get("/vms", params={"sort": "create_timestamp",
                                                   "marker": marker}), 409, "ValidationFailed")
    assert error_fields(body) == {"marker": "Invalid"}, body


def test_an_instant_beyond_utc_already_in_the_log_does_not_stop_its_readers(
        client, services) -> None:
    """Stored before the check existed: the readers write it as the nearest instant UTC has."""
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    head = services.commands.head_position()
    late = datetime.fromisoformat(BEYOND_UTC["after year 9999"])
    AgentVmReports(services.agents).put(
        vm_uuid, AgentVm(state="stopped", server_uuid=server, last_modified=late),
        cause=make_cause("test"))
    history = client.get(f"/vms/{vm_uuid}/history")
    assert history.status_code == 200, history.text
    assert history_types(client, vm_uuid)[-1] == "AgentReported"
    [reported] = [e for e in history.json() if e["type"] == "AgentReported"]
    assert reported["data"]["reported_at"] == "9999-12-31T23:59:59.999Z", reported
    # /changes and the Triton changefeed fold the log with ChangeFolder
    appended = services.app.recorder.select_notifications(head, 10, inclusive_of_start=False)
    [change] = [c for c in ChangeFolder(services.app).fold(appended)
                if c.type == "AgentReported"]
    assert '"reported_at":"9999-12-31T23:59:59.999Z"' in change.data, change.data
