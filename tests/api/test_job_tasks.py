"""ListJobs' ``task``, VMAPI's names of its jobs (sdc-vmapi ``lib/apis/wfapi.js``: each job's
``params.task``), and ``execution`` as VMAPI's Workflow API checks it (docs/jobs.md, "Listing
jobs by VMAPI's task"). Found by a tester: ``task=kill`` and ``task=snapshot`` were refused
with 409, where VMAPI lists the kills and answers ``[]`` for a task with no jobs."""

from __future__ import annotations

import pytest

from tests.api.helpers import act_and_wait, assert_error, create_running_vm, error_fields

# VMAPI's tasks vmledger queues no job for: always none of them
UNMODELLED = ("reprovision", "update_nics", "snapshot", "migrate-begin", "migrate-sync",
              "migrate-switch", "migrate-abort", "migrate-pause", "migrate-rollback")


def _uuids(client, path: str, **params: str) -> list[str]:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return [job["uuid"] for job in response.json()]


def test_task_kill_lists_the_stop_jobs_a_kill_queued_and_task_stop_the_others(client) -> None:
    vm = create_running_vm(client)
    killed = act_and_wait(client, vm, "kill")
    assert killed["name"] == "stop" and killed["params"]["args"] == {"force": True}
    act_and_wait(client, vm, "start")
    stopped = act_and_wait(client, vm, "stop")
    for path in ("/jobs", f"/vms/{vm}/jobs"):
        assert _uuids(client, path, task="kill") == [killed["uuid"]]
        assert _uuids(client, path, task="stop") == [stopped["uuid"]]
        # ``name`` is the job's own: a kill's job is a stop job
        assert _uuids(client, path, name="stop") == [stopped["uuid"], killed["uuid"]]
        assert _uuids(client, path, task="kill", execution="succeeded") == [killed["uuid"]]
        assert _uuids(client, path, task="kill", execution="failed") == []


@pytest.mark.parametrize("task", UNMODELLED)
def test_a_vmapi_task_vmledger_queues_no_job_for_lists_none(client, task) -> None:
    vm = create_running_vm(client)
    for path in ("/jobs", f"/vms/{vm}/jobs"):
        assert _uuids(client, path, task=task) == []
    conflict = assert_error(client.get("/jobs", params={"task": task, "name": "stop"}), 409,
                            "ConflictingParameters")
    assert [e["field"] for e in conflict["errors"]] == ["task"]


def test_a_task_naming_no_job_of_vmapis_or_ours_is_still_refused(client) -> None:
    for task in ("frobnicate", "Kill", "migrate", "migrate-estimate"):
        body = assert_error(client.get("/jobs", params={"task": task}), 409, "ValidationFailed")
        assert error_fields(body) == {"task": "Invalid"}
        message = body["errors"][0]["message"]
        assert "kill" in message and "snapshot" in message, message


def test_an_execution_vmapis_workflow_api_refuses_is_refused(client) -> None:
    # node-workflow's GET /jobs takes these five alone ("Execution must be one of queued,
    # failed, succeeded, canceled or running"); its jobs' retried and waiting are refused
    for execution in ("retried", "waiting"):
        body = assert_error(client.get("/jobs", params={"execution": execution}), 409,
                            "ValidationFailed")
        assert error_fields(body) == {"execution": "Invalid"}
