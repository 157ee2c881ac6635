"""Instants that no UTC datetime holds: a date at the edge of the calendar whose offset
carries it past year 1 or year 9999 in UTC. Each query parameter that reads an instant
refuses them as it refuses any malformed one (409 ``ValidationFailed``), where converting
them to UTC raised ``OverflowError`` (a plain-text 500). So does vm-agent's PutVm body: a
report dated ``9999-12-31T23:59:59-01:00`` was stored, and from then on the VM's history, the
console's VM page, ``/changes``, the Triton changefeed and ``vmledger history`` failed, for
good; a report dated far ahead of the service's clock is refused too (it would make every
later real report "not newer"), and such an instant already in the log is written as the
nearest one UTC can carry."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from domain.vm import make_cause
from projections.vm_markers import encode_marker
from service.changes.records import ChangeFolder
from service.commands.vm_agent import AgentVm, AgentVmReports
from tests.api.helpers import (
    V2, assert_error, create_running_vm, error_fields, get_vm, history_types,
)

# Year 1 at +01:00 is year 0 in UTC; year 9999 at -01:00 is year 10000.
BEYOND_UTC = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")
SOME_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"


def _refused(response, field: str, message: str | None = None) -> None:
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["code"] == "ValidationFailed", body
    assert [e["field"] for e in body["errors"]] == [field], body
    if message is not None:
        assert body["errors"][0]["message"] == message, body


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_list_vms_create_timestamp_beyond_utc_is_an_invalid_timestamp(client, stamp) -> None:
    response = client.get("/vms", params={"create_timestamp": stamp})
    _refused(response, "create_timestamp", f"Invalid timestamp: {stamp}")
    assert response.json()["message"] == "Invalid Parameters"
    head = client.head("/vms", params={"create_timestamp": stamp})
    assert head.status_code == 409 and head.content == b""


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_a_vmapi_marker_with_a_timestamp_beyond_utc_is_an_invalid_marker(client, stamp) -> None:
    marker = json.dumps({"uuid": SOME_UUID, "create_timestamp": stamp})
    response = client.get("/vms", params={"sort": "create_timestamp.asc", "marker": marker})
    _refused(response, "marker", f"Invalid marker: {marker}. "
                                 f"Marker has an invalid create_timestamp field: {stamp}")


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_our_marker_with_a_timestamp_beyond_utc_is_an_invalid_marker(client, stamp) -> None:
    marker = encode_marker("create_timestamp.asc", stamp, SOME_UUID)
    response = client.get("/vms", params={"sort": "create_timestamp.asc", "marker": marker})
    _refused(response, "marker")


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_time_travel_at_an_instant_beyond_utc_is_refused_naming_at(client, stamp) -> None:
    vm_uuid = create_running_vm(client)
    for path in (f"/vms/{vm_uuid}", f"/console/fragments/vms/{vm_uuid}/state"):
        _refused(client.get(path, params={"at": stamp}), "at")
    # the same instants written in UTC's own range are served
    assert client.get(f"/vms/{vm_uuid}", params={"at": "0001-01-01T00:00:00Z"}).status_code == 404
    assert client.get(f"/vms/{vm_uuid}", params={"at": "9999-12-31T23:59:59Z"}).status_code == 200


@pytest.mark.parametrize("stamp", BEYOND_UTC)
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


def test_an_instant_beyond_utc_already_in_the_log_does_not_stop_its_readers(
        client, services) -> None:
    """Stored before the check existed: the readers write it as the nearest instant UTC has."""
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    head = services.commands.head_position()
    late = datetime.fromisoformat(BEYOND_UTC[1])
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
