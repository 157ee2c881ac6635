"""GetVm: ``GET /vms/{uuid}``, its owner scoping, time travel (``?version=``, ``?at=``) and
read-your-writes (api.md, "VM object (GetVm)", "Read-your-writes", design.md "Auditing")."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from tests.api.helpers import (
    OTHER_OWNER, OWNER, V2, act, act_and_wait, assert_error, create_running_vm, create_vm,
    error_fields, get_vm, wait_job,
)
from tests.tampering import delete_event
from tests.waiting import wait_until

VM_FIELDS = {
    "uuid", "alias", "owner_uuid", "server_uuid", "brand", "image_uuid", "ram", "cpu_cap", "nics",
    "state", "desired_state", "persistence", "customer_metadata", "internal_metadata", "tags",
    "volumes", "error", "quarantine", "active_job_uuid", "queued_job_uuids",
    "create_timestamp", "last_modified", "destroyed", "version",
}


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_get_vm_answers_every_field_of_the_vm_object_and_its_version_as_etag(client) -> None:
    vm_uuid = create_running_vm(client, alias="web", tags={"a": "b"})
    response = client.get(f"/vms/{vm_uuid}")
    assert response.status_code == 200
    vm = response.json()
    assert set(vm) == VM_FIELDS
    assert response.headers["ETag"] == f'"{vm["version"]}"'
    assert vm["uuid"] == vm_uuid
    assert (vm["state"], vm["desired_state"], vm["persistence"]) == (
        "running", "running", "persistent")
    assert vm["volumes"] == [] and vm["queued_job_uuids"] == []
    assert vm["error"] is None and vm["quarantine"] is None and vm["destroyed"] is None
    assert vm["active_job_uuid"] is None
    for stamp in (vm["create_timestamp"], vm["last_modified"]):
        assert stamp.endswith("Z") and len(stamp) == len("2026-01-01T00:00:00.000Z")
    assert parse(vm["create_timestamp"]) <= parse(vm["last_modified"])


def test_an_unknown_vm_is_404_resource_not_found_with_a_vmapi_body(client) -> None:
    response = client.get(f"/vms/{uuid.uuid4()}")
    body = assert_error(response, 404, "ResourceNotFound")
    assert set(body) == {"code", "message"}


def test_another_owners_vm_is_404_and_the_owners_own_is_200(client) -> None:
    vm_uuid = create_vm(client)["vm_uuid"]
    assert_error(client.get(f"/vms/{vm_uuid}", params={"owner_uuid": OTHER_OWNER}),
                 404, "ResourceNotFound")
    assert client.get(f"/vms/{vm_uuid}", params={"owner_uuid": OWNER}).status_code == 200


def test_a_malformed_owner_uuid_is_refused_naming_it(client) -> None:
    vm_uuid = create_vm(client)["vm_uuid"]
    body = assert_error(client.get(f"/vms/{vm_uuid}", params={"owner_uuid": "nope"}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"owner_uuid": "Invalid"}


def test_get_vm_refuses_unknown_and_malformed_parameters(client) -> None:
    vm_uuid = create_vm(client)["vm_uuid"]
    for params, field in (({"colour": "blue"}, "colour"), ({"version": "0"}, "version"),
                          ({"version": "two"}, "version"), ({"at": "yesterday"}, "at"),
                          ({"at": "2026-01-01T00:00:00"}, "at")):
        body = assert_error(client.get(f"/vms/{vm_uuid}", params=params, headers=V2),
                            422, "ValidationFailed")
        assert error_fields(body) == {field: "Invalid"}, params


def fold(history: list[dict]) -> list[dict]:
    """The VM's lifecycle fields after each event, folded independently of the service."""
    state: dict = {"state": None, "server_uuid": None, "queued_job_uuids": [],
                   "active_job_uuid": None}
    after = []
    for event in history:
        kind, data = event["type"], event["data"]
        if kind == "Created":
            state["state"] = "provisioning"
        elif kind == "JobQueued":
            state["queued_job_uuids"] = [*state["queued_job_uuids"], data["job_uuid"]]
        elif kind == "JobStarted":
            state["queued_job_uuids"] = [
                j for j in state["queued_job_uuids"] if j != data["job_uuid"]]
            state["active_job_uuid"] = data["job_uuid"]
        elif kind in ("JobSucceeded", "JobFailed"):
            state["active_job_uuid"] = None
        elif kind == "Provisioned":
            state["state"], state["server_uuid"] = "running", data["server_uuid"]
        elif kind == "Stopped":
            state["state"] = "stopped"
        elif kind == "Started":
            state["state"] = "running"
        elif kind == "CapacityClaimed":  # placed: shown on its server before it is there
            state["server_uuid"] = state["server_uuid"] or data["server_uuid"]
        else:  # events that change none of these fields
            assert kind in ("JobStepRecorded", "NodeObserved", "JobLeaseRenewed"), kind
        after.append({**state, "version": event["version"],
                      "last_modified": event["timestamp"]})
    return after


def test_every_past_version_is_the_vm_as_it_was_after_that_event(client) -> None:
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "stop")
    history = client.get(f"/vms/{vm_uuid}/history").json()
    expected = fold(history)
    assert len(expected) >= 10
    for want in expected:
        response = client.get(f"/vms/{vm_uuid}", params={"version": want["version"]})
        assert response.status_code == 200, response.text
        assert response.headers["ETag"] == f'"{want["version"]}"'
        vm = response.json()
        assert {k: vm[k] for k in want} == want
        assert vm["create_timestamp"] == history[0]["timestamp"]
    # the newest version folded from the log equals the read model's VM
    current = client.get(f"/vms/{vm_uuid}").json()
    assert client.get(f"/vms/{vm_uuid}", params={"version": current["version"]}).json() == current
    # version 1: provisioning, and the provision job not queued yet
    first = client.get(f"/vms/{vm_uuid}", params={"version": 1}).json()
    assert (first["state"], first["queued_job_uuids"], first["server_uuid"]) == (
        "provisioning", [], None)


def test_a_version_beyond_the_current_one_is_404(client) -> None:
    created = create_vm(client)
    wait_job(client, created["job_uuid"])
    current = get_vm(client, created["vm_uuid"])["version"]
    response = client.get(f"/vms/{created['vm_uuid']}", params={"version": current + 1})
    body = assert_error(response, 404, "ResourceNotFound")
    # a valid uuid is not said to be "not a uuid" (contract tester)
    assert body["message"] == (f"VM not found at version {current + 1} (current "
                               f"version is {current})")
    assert_error(client.get(f"/vms/{uuid.uuid4()}", params={"version": 1}),
                 404, "ResourceNotFound")


def test_at_an_instant_between_two_events_answers_the_earlier_state(paused) -> None:
    http = paused.http
    created = create_vm(http)
    queued = http.get(f"/vms/{created['vm_uuid']}/history").json()[-1]
    assert queued["type"] == "JobQueued"
    queued_at = parse(queued["timestamp"])
    # let the clock move on before the provision runs, so an instant lies between the two
    wait_until(lambda: datetime.now(UTC) >= queued_at + timedelta(milliseconds=3))
    paused.run_jobs()
    history = http.get(f"/vms/{created['vm_uuid']}/history").json()
    started = history[queued["version"]]  # the next event
    assert started["type"] == "JobStarted"
    assert parse(started["timestamp"]) >= queued_at + timedelta(milliseconds=2)
    between = rfc3339(queued_at + timedelta(milliseconds=1))
    vm = get_vm(http, created["vm_uuid"], at=between)
    assert vm["version"] == queued["version"]
    assert (vm["state"], vm["queued_job_uuids"]) == ("provisioning", [created["job_uuid"]])
    # an instant after the last event is the current VM; one before the first is 404
    now = get_vm(http, created["vm_uuid"], at=rfc3339(datetime.now(UTC)))
    assert now["version"] == history[-1]["version"] and now["state"] == "running"
    before = rfc3339(parse(history[0]["timestamp"]) - timedelta(seconds=1))
    body = assert_error(http.get(f"/vms/{created['vm_uuid']}", params={"at": before}),
                        404, "ResourceNotFound")
    assert body["message"] == f"VM not found (it did not exist at {before})"


def test_at_takes_rfc_3339s_lower_case_t_and_z(client) -> None:
    # RFC 3339, 5.6: "T" and "Z" may be lower case (found by a new user: refused as malformed)
    vm_uuid = create_running_vm(client)
    now = rfc3339(datetime.now(UTC))
    assert get_vm(client, vm_uuid, at=now.lower())["version"] == get_vm(
        client, vm_uuid, at=now)["version"]


def test_a_get_right_after_each_command_sees_its_effect(client) -> None:
    for _ in range(3):
        response = client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent",
                                             "ram": 128})
        assert response.status_code == 202
        vm_uuid, job_uuid = response.json()["vm_uuid"], response.json()["job_uuid"]
        seen = client.get(f"/vms/{vm_uuid}")
        assert seen.status_code == 200, "a created VM must never read as 404"
        assert seen.json()["version"] >= int(response.headers["ETag"].strip('"'))
        assert client.get(f"/jobs/{job_uuid}").status_code == 200
        assert [vm["uuid"] for vm in client.get("/vms", params={"uuids": vm_uuid}).json()] == [
            vm_uuid]
        assert job_uuid in [j["uuid"] for j in client.get(f"/vms/{vm_uuid}/jobs").json()]
    wait_job(client, job_uuid)
    stop = act(client, vm_uuid, "stop")
    assert stop.status_code == 202
    assert get_vm(client, vm_uuid)["version"] >= int(stop.headers["ETag"].strip('"'))
    assert stop.json()["job_uuid"] in [
        j["uuid"] for j in client.get("/jobs", params={"vm_uuid": vm_uuid}).json()]
    wait_job(client, stop.json()["job_uuid"])
    assert get_vm(client, vm_uuid)["state"] == "stopped"


@pytest.fixture
def stalled(services):
    """The API with neither the projection runner nor the job worker running."""
    services.settings.read_timeout_s = 0.2
    with TestClient(create_app(services=services, background=False)) as http:
        yield http


def test_a_read_whose_projection_lags_is_503_with_retry_after_unless_eventual(stalled) -> None:
    created = stalled.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 128})
    assert created.status_code == 202
    path = f"/vms/{created.json()['vm_uuid']}"
    response = stalled.get(path)
    assert_error(response, 503, "Unavailable")
    assert response.headers["Retry-After"]
    # eventual skips the wait: it answers from the read model as it is (not there yet)
    assert_error(stalled.get(path, params={"consistency": "eventual"}), 404, "ResourceNotFound")
    assert stalled.get("/vms", params={"consistency": "eventual"}).json() == []


@pytest.mark.parametrize("version", ["99999999999999999999999", "-99999999999999999999999",
                                     "9007199254740992", "0"])
def test_a_version_out_of_range_is_refused_with_the_range_however_many_digits(
        client, version) -> None:
    # found by a tester: an integer of more than 20 digits was "must be an integer"
    created = create_vm(client)
    body = assert_error(client.get(f"/vms/{created['vm_uuid']}", params={"version": version}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"version": "Invalid"}
    assert body["errors"][0]["message"] == "must be 1 to 9007199254740991"


def test_a_past_version_beyond_a_deleted_event_is_503_naming_the_gap(client, services) -> None:
    # found by a tester: an event deleted behind the service's back made this a 500
    vm_uuid = create_running_vm(client)
    delete_event(services, vm_uuid, 3)
    body = assert_error(client.get(f"/vms/{vm_uuid}", params={"version": 5}), 503, "Unavailable")
    assert f"stream {vm_uuid} has a gap: its event of version 4 follows version 2" in body["message"]
    assert client.get(f"/vms/{vm_uuid}", params={"version": 2}).status_code == 200
