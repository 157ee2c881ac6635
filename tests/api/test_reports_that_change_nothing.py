"""A vm-agent report (``PUT /vms/{uuid}`` without a generation) that changes nothing records
nothing: no ``AgentReported``, so it moves no ordering mark later reports are compared against
(api.md "Compute agents"; events.md ``AgentReported``: recorded with the events the report
caused). A tester's: a report about another server, dated half an hour ahead, recorded its
``last_modified`` and so made the real server's reports "not newer" for that half hour."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.api.helpers import create_running_vm, get_vm, history_types, wait_job


def _at(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat().replace("+00:00", "Z")


def put(client, vm_uuid: str, **fields):
    return client.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, **fields})


def _appends_nothing(client, services, vm_uuid: str, **fields) -> dict:
    head, before = services.commands.head_position(), history_types(client, vm_uuid)
    answer = put(client, vm_uuid, **fields)
    assert answer.status_code == 200, answer.text
    assert "x-log-position" not in answer.headers
    assert services.commands.head_position() == head
    assert history_types(client, vm_uuid) == before
    return answer.json()


def test_a_future_report_about_another_server_leaves_the_real_servers_reports_applied(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    vm = _appends_nothing(client, services, vm_uuid, state="stopped",
                          server_uuid=str(uuid.uuid4()), last_modified=_at(timedelta(minutes=30)))
    assert vm["state"] == "running"
    real = put(client, vm_uuid, state="stopped", server_uuid=server,
               last_modified=_at(-timedelta(seconds=30)))
    assert real.status_code == 200, real.text
    assert real.json()["state"] == "stopped"
    assert "x-log-position" in real.headers
    assert history_types(client, vm_uuid)[-2:] == ["Stopped", "AgentReported"]


@pytest.mark.parametrize("fields", [
    {"state": "running"},  # no server: not the VM's
    {"state": "running", "server_uuid": None},
    {"state": "stopping"},  # a state vmledger does not model
    {"state": "provisioning"},
], ids=["bare", "null-server", "unmodelled-state", "provisioning"])
def test_a_report_that_is_not_the_vms_servers_or_says_no_state_records_nothing(
        client, services, fields) -> None:
    vm_uuid = create_running_vm(client)
    assert _appends_nothing(client, services, vm_uuid, **fields)["state"] == "running"
    # no mark moved: a report of the VM's server dated before now still applies
    server = get_vm(client, vm_uuid)["server_uuid"]
    real = put(client, vm_uuid, state="stopped", server_uuid=server,
               last_modified=_at(-timedelta(seconds=30)))
    assert real.json()["state"] == "stopped"


def test_a_report_of_the_vms_server_agreeing_with_the_log_still_orders_the_later_ones(
        client, services) -> None:
    """The VM's own server saw it running as of T: a report of that server dated before T
    that arrives late is stale, and must not undo what T saw (VMAPI keeps the object's
    ``last_modified`` of every report it applies). So such a report records its mark
    (``AgentReported`` alone); a state nothing is recorded of moves none."""
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    agreeing = put(client, vm_uuid, state="running", server_uuid=server,
                   last_modified=_at(timedelta(minutes=30)))
    assert agreeing.status_code == 200, agreeing.text
    assert "x-log-position" in agreeing.headers
    assert history_types(client, vm_uuid)[-1] == "AgentReported"
    _appends_nothing(client, services, vm_uuid, state="shutting_down", server_uuid=server,
                     last_modified=_at(timedelta(minutes=31)))
    stale = _appends_nothing(client, services, vm_uuid, state="stopped", server_uuid=server,
                             last_modified=_at(-timedelta(seconds=30)))
    assert stale["state"] == "running"
    newer = put(client, vm_uuid, state="stopped", server_uuid=server,
                last_modified=_at(timedelta(minutes=32)))
    assert newer.json()["state"] == "stopped"


def test_a_report_of_a_destroyed_vm_records_nothing(client, services) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    wait_job(client, client.delete(f"/vms/{vm_uuid}").json()["job_uuid"])
    vm = _appends_nothing(client, services, vm_uuid, state="running", server_uuid=server,
                          last_modified=_at(timedelta(minutes=1)))
    assert vm["state"] == "destroyed"
