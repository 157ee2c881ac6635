"""Jobs: ``GET /vms/{uuid}/jobs``, ``GET /jobs``, ``GET /jobs/{uuid}`` and
``GET /jobs/{uuid}/wait`` (api.md, "Endpoints", the job object, "VMAPI client compatibility")."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.api.helpers import (
    OTHER_OWNER, TERMINAL, V2, act, act_and_wait, assert_error, create_running_vm, create_vm,
    error_fields, wait_job,
)

JOB_FIELDS = {"uuid", "name", "execution", "vm_uuid", "params", "created_at", "started_at",
              "finished_at", "attempt", "error", "chain_results"}
STEP_FIELDS = {"name", "result", "error", "started_at", "finished_at"}


def test_get_job_answers_the_job_object(client) -> None:
    created = create_vm(client)
    wait_job(client, created["job_uuid"])
    response = client.get(f"/jobs/{created['job_uuid']}")
    assert response.status_code == 200
    job = response.json()
    assert set(job) == JOB_FIELDS
    assert (job["uuid"], job["name"], job["vm_uuid"]) == (
        created["job_uuid"], "provision", created["vm_uuid"])
    assert (job["execution"], job["attempt"], job["error"]) == ("succeeded", 1, None)
    assert job["created_at"] <= job["started_at"] <= job["finished_at"]
    for stamp in (job["created_at"], job["started_at"], job["finished_at"]):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), stamp
    assert [step["name"] for step in job["chain_results"]] == [
        "place", "ensure_registered", "ensure_state"]
    assert all(set(step) == STEP_FIELDS for step in job["chain_results"])


def test_an_unknown_job_is_404_for_get_and_wait(client) -> None:
    missing = str(uuid.uuid4())
    assert_error(client.get(f"/jobs/{missing}"), 404, "ResourceNotFound")
    assert_error(client.get(f"/jobs/{missing}/wait", params={"timeout": 1}),
                 404, "ResourceNotFound")


def test_a_vms_jobs_are_listed_newest_first_and_filtered(client) -> None:
    created = create_vm(client)
    wait_job(client, created["job_uuid"])
    stop = act_and_wait(client, created["vm_uuid"], "stop")
    failed = act_and_wait(client, created["vm_uuid"], "stop")  # v1: fails on a stopped VM
    other = create_running_vm(client)
    path = f"/vms/{created['vm_uuid']}/jobs"
    jobs = client.get(path).json()
    assert [j["uuid"] for j in jobs] == [failed["uuid"], stop["uuid"], created["job_uuid"]]
    assert all(set(j) == JOB_FIELDS for j in jobs)
    assert [j["uuid"] for j in client.get(path, params={"name": "stop"}).json()] == [
        failed["uuid"], stop["uuid"]]
    assert [j["uuid"] for j in client.get(path, params={"execution": "failed"}).json()] == [
        failed["uuid"]]
    assert [j["uuid"] for j in client.get(path, params={"limit": 1, "offset": 1}).json()] == [
        stop["uuid"]]
    assert other not in {j["vm_uuid"] for j in jobs}
    assert_error(client.get(f"/vms/{uuid.uuid4()}/jobs"), 404, "ResourceNotFound")
    assert_error(client.get(path, params={"owner_uuid": OTHER_OWNER}), 404, "ResourceNotFound")


def test_list_jobs_filters_by_vm_execution_and_name(client) -> None:
    first = create_running_vm(client)
    second = create_vm(client, internal_metadata={"force_provision_failure": True})
    wait_job(client, second["job_uuid"])
    stop = act_and_wait(client, first, "stop")

    def uuids(**params) -> list[str]:
        response = client.get("/jobs", params=params)
        assert response.status_code == 200, response.text
        return [job["uuid"] for job in response.json()]

    assert len(uuids()) == 3
    assert uuids(vm_uuid=first)[0] == stop["uuid"] and len(uuids(vm_uuid=first)) == 2
    assert uuids(execution="failed") == [second["job_uuid"]]
    assert uuids(name="stop") == [stop["uuid"]]
    assert uuids(vm_uuid=first, name="provision", execution="succeeded") == [
        job["uuid"] for job in client.get(f"/vms/{first}/jobs", params={"name": "provision"})
        .json()]
    assert uuids(vm_uuid=str(uuid.uuid4())) == []
    assert uuids(owner_uuid=OTHER_OWNER) == []


def test_list_jobs_refuses_bad_parameters_naming_each(client) -> None:
    for params, field in (({"vm_uuid": "nope"}, "vm_uuid"), ({"execution": "paused"}, "execution"),
                          ({"name": "explode"}, "name"), ({"limit": 0}, "limit"),
                          ({"colour": "blue"}, "colour")):
        body = assert_error(client.get("/jobs", params=params, headers=V2),
                            422, "ValidationFailed")
        assert error_fields(body) == {field: "Invalid"}, params


def test_wait_returns_the_job_once_it_is_terminal(paused) -> None:
    created = create_vm(paused.http)
    paused.run_jobs()
    response = paused.http.get(f"/jobs/{created['job_uuid']}/wait", params={"timeout": 10})
    assert response.status_code == 200
    assert response.json()["execution"] == "succeeded"


def test_wait_answers_at_its_timeout_with_the_job_as_it_is(paused) -> None:
    created = create_vm(paused.http)
    response = paused.http.get(f"/jobs/{created['job_uuid']}/wait", params={"timeout": 0})
    assert response.status_code == 200
    assert response.json()["execution"] == "queued"


def test_wait_refuses_a_timeout_out_of_bounds(client) -> None:
    created = create_vm(client)
    for timeout in ("-1", "121", "soon"):
        response = client.get(f"/jobs/{created['job_uuid']}/wait", params={"timeout": timeout})
        assert error_fields(assert_error(response, 409, "ValidationFailed")) == {
            "timeout": "Invalid"}


def test_every_terminal_job_has_a_chain_result_whose_last_error_is_empty_iff_it_succeeded(
        paused) -> None:
    http = paused.http
    canceled = create_vm(http)
    assert http.delete(f"/vms/{canceled['vm_uuid']}", headers=V2).status_code == 202
    create_vm(http, internal_metadata={"force_provision_failure": True})
    running = create_vm(http)
    paused.run_jobs()
    for action in ("stop", "start", "reboot"):
        assert act(http, running["vm_uuid"], action).status_code == 202
        paused.run_jobs()
    assert act(http, running["vm_uuid"], "start").status_code == 202  # v1: fails, running
    assert act(http, running["vm_uuid"], "update", json={"alias": "x"}).status_code == 202
    paused.run_jobs()
    jobs = http.get("/jobs").json()
    assert {job["execution"] for job in jobs} == {"succeeded", "failed", "canceled"}
    for job in jobs:
        assert job["execution"] in TERMINAL
        assert job["chain_results"], job
        assert all(set(step) == STEP_FIELDS for step in job["chain_results"])
        last_error = job["chain_results"][-1]["error"]
        assert (not last_error) == (job["execution"] == "succeeded"), job
        assert (not job["error"]) == (job["execution"] == "succeeded"), job
        assert job["finished_at"] is not None


def test_an_owner_scoped_read_of_a_job_just_accepted_finds_it(services, monkeypatch) -> None:
    # An owner sees a job through its VM's owner in vm_view: GetJob and WaitJob must wait for
    # vm_view as well as job_view, or a job just accepted is 404 while vm_view lags.
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from tests.api.helpers import OWNER

    wait_for = services.projections.wait_for

    def runner_catches_up_what_is_waited_for(position, names, timeout):
        services.projections.catch_up(list(names))  # as a runner would meanwhile
        return wait_for(position, names, timeout)

    monkeypatch.setattr(services.projections, "wait_for", runner_catches_up_what_is_waited_for)
    with TestClient(create_app(services=services, background=False)) as http:
        job_uuid = create_vm(http)["job_uuid"]
        got = http.get(f"/jobs/{job_uuid}", params={"owner_uuid": OWNER})
        assert got.status_code == 200, got.text
        waited = http.get(f"/jobs/{job_uuid}/wait", params={"owner_uuid": OWNER, "timeout": 0})
        assert waited.status_code == 200, waited.text
        assert waited.json()["execution"] == "queued"


@pytest.mark.parametrize(("params", "status"), [
    ({"task": "update", "name": "stop"}, 409), ({"task": "stop", "name": "stop"}, 409),
    ({"task": "update", "name": "stop", "Accept-Version": "~2"}, 422),
])
def test_task_with_name_is_refused_as_conflicting_parameters(client, params, status) -> None:
    # found by a tester: name silently won over task (its VMAPI name), where every other pair
    # that cannot go together is refused (version with at, offset with marker)
    params = dict(params)  # the same dict serves each backend's run
    version = params.pop("Accept-Version", None)
    response = client.get("/jobs", params=params,
                          headers={"Accept-Version": version} if version else {})
    body = assert_error(response, status, "ConflictingParameters")
    assert [e["field"] for e in body["errors"]] == ["task"]
    assert "task and name" in body["message"]


def test_a_bad_task_is_refused_naming_task(client) -> None:
    body = assert_error(client.get("/jobs", params={"task": "frobnicate"}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"task": "Invalid"}
    assert client.get("/jobs", params={"task": "stop"}).status_code == 200


def test_a_vms_jobs_take_task_as_jobs_does(client) -> None:
    # tester D, bug 8: api.md names task on both lists; GET /vms/{uuid}/jobs refused it
    vm_uuid = create_running_vm(client)
    path = f"/vms/{vm_uuid}/jobs"
    by_task = client.get(path, params={"task": "provision"})
    assert by_task.status_code == 200, by_task.text
    assert [job["name"] for job in by_task.json()] == ["provision"]
    assert client.get(path, params={"task": "update"}).json() == []
    body = assert_error(client.get(path, params={"task": "frobnicate"}), 409, "ValidationFailed")
    assert error_fields(body) == {"task": "Invalid"}
    conflict = assert_error(client.get(path, params={"task": "update", "name": "stop"}), 409,
                            "ConflictingParameters")
    assert [e["field"] for e in conflict["errors"]] == ["task"]
    assert_error(client.get(path, params={"task": "update", "name": "stop"}, headers=V2), 422,
                 "ConflictingParameters")


def test_jobs_list_newest_first_by_log_position_whatever_the_clocks_say(
        paused, monkeypatch) -> None:
    # found by a tester: with two HTTP processes, adjacent jobs listed the later created_at
    # second. Decided: the log's positions are the order (api.md, "Reads"); created_at is
    # the clock of the process that took the command. Here a second process whose clock is
    # an hour behind queues the newer job.
    from datetime import UTC, datetime, timedelta

    from eventsourcing.domain import CanCreateTimestamp

    first = paused.http.post("/vms", json={"owner_uuid": OTHER_OWNER, "brand": "joyent",
                                           "ram": 128})
    behind = datetime.now(UTC) - timedelta(hours=1)
    monkeypatch.setattr(CanCreateTimestamp, "create_timestamp", staticmethod(lambda: behind))
    second = paused.http.post("/vms", json={"owner_uuid": OTHER_OWNER, "brand": "joyent",
                                            "ram": 128})
    monkeypatch.undo()
    assert int(second.headers["x-log-position"]) > int(first.headers["x-log-position"])
    jobs = paused.http.get("/jobs").json()
    assert [j["uuid"] for j in jobs] == [second.json()["job_uuid"], first.json()["job_uuid"]]
    assert jobs[0]["created_at"] < jobs[1]["created_at"]


@pytest.mark.parametrize("params", [{"task": ""}, {"name": ""}, {"task": "", "name": "stop"},
                                    {"name": "", "task": "stop"}, {"execution": ""}])
def test_an_empty_job_filter_is_refused_as_any_value_naming_no_job(client, params) -> None:
    # found by a tester: ``task=&name=stop`` listed the stop jobs (an empty task or name was
    # read as no filter) where an empty ``execution=`` was refused
    for path in ("/jobs", f"/vms/{create_running_vm(client)}/jobs"):
        body = assert_error(client.get(path, params=params), 409, "ValidationFailed")
        empty = next(name for name, value in params.items() if value == "")
        assert error_fields(body) == {empty: "Invalid"}, body
        assert body["errors"][0]["message"].startswith("must be one of")
