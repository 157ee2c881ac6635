"""``job_view``: the job objects, from the Job* events of every VM stream."""

from __future__ import annotations

import pytest

from domain.states import Action, VmState
from projections.job_view import JobView
from tests.builders import (
    LEASE, T0, a_mix_of_commands_and_jobs, act, cause, create, new_vm, queue, rows, settle,
    vm_in,
)


def apply(services, events, first_position: int = 1) -> None:
    """Feed domain events straight into a JobView, in one transaction."""
    with services.db.transaction() as tx:
        JobView().apply(tx, list(enumerate(events, first_position)))


def test_a_queued_job_becomes_a_queued_row(services):
    vm = new_vm()
    job_uuid = vm.head_job["uuid"]
    apply(services, vm.collect_events())
    job = services.jobs.get(job_uuid)
    assert job["name"] == "provision" and job["execution"] == "queued"
    assert job["vm_uuid"] == str(vm.id) and job["attempt"] == 0
    assert job["chain_results"] == [] and job["started_at"] is None
    assert rows(services, "job_view")[0]["position"] == 2


def test_a_job_through_start_steps_and_success(services):
    vm = new_vm()
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    vm.record_step(job_uuid, {"name": "place", "error": None}, cause=cause(), worker="w1")
    vm.record_step(job_uuid, {"name": "boot", "error": None}, cause=cause(), worker="w1")
    apply(services, vm.collect_events())
    running = services.jobs.get(job_uuid)
    assert running["execution"] == "running" and running["attempt"] == 1
    assert running["started_at"] is not None
    assert [s["name"] for s in running["chain_results"]] == ["place", "boot"]
    vm.succeed_job(job_uuid, cause=cause(), worker="w1")
    apply(services, vm.collect_events(), first_position=6)
    done = services.jobs.get(job_uuid)
    assert done["execution"] == "succeeded" and done["error"] is None
    assert done["finished_at"] is not None and done["started_at"] == running["started_at"]
    assert rows(services, "job_view")[0]["lease_expires_at"] is None


def test_a_takeover_keeps_the_first_start_and_counts_the_attempt(services):
    vm = new_vm()
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    apply(services, vm.collect_events())
    first_start = services.jobs.get(job_uuid)["started_at"]
    later = T0 + LEASE * 2
    vm.start_job(job_uuid, worker="w2", now=later, lease_expires_at=later + LEASE, cause=cause())
    apply(services, vm.collect_events(), first_position=4)
    row = rows(services, "job_view")[0]
    assert (row["attempt"], row["worker"], row["started_at"]) == (2, "w2", first_start)


def test_a_failed_job_keeps_its_error(services):
    vm = vm_in(VmState.RUNNING)
    job_uuid = queue(vm, Action.STOP)
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    vm.record_step(job_uuid, {"name": "stop", "error": "boom"}, cause=cause(), worker="w1")
    vm.fail_job(job_uuid, "boom", cause=cause(), worker="w1")
    apply(services, vm.collect_events())
    job = services.jobs.get(job_uuid)
    assert job["execution"] == "failed" and job["error"] == "boom"
    assert job["chain_results"][-1]["error"] == "boom"


def test_a_canceled_job_ends_with_a_cancel_chain_result_carrying_the_reason(services):
    vm = new_vm()
    job_uuid = vm.head_job["uuid"]
    vm.cancel_job(job_uuid, "canceled by a DeleteVm", cause=cause())
    apply(services, vm.collect_events())
    job = services.jobs.get(job_uuid)
    assert job["execution"] == "canceled" and job["error"] == "canceled by a DeleteVm"
    assert [(s["name"], s["error"]) for s in job["chain_results"]] == [
        ("cancel", "canceled by a DeleteVm")]


def test_a_step_of_a_job_the_view_never_saw_queued_is_caught(services):
    vm = new_vm()
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    vm.collect_events()
    vm.record_step(job_uuid, {"name": "place"}, cause=cause(), worker="w1")
    with pytest.raises(LookupError, match="missed"):
        apply(services, vm.collect_events(), first_position=4)


def test_jobs_are_listed_newest_first_and_filtered(services):
    a = create(services)
    b = create(services)
    stop = act(services, a.vm_uuid, Action.STOP)
    services.projections.catch_up()
    assert [j["uuid"] for j in services.jobs.list()] == [stop.job_uuid, b.job_uuid, a.job_uuid]
    assert [j["uuid"] for j in services.jobs.list(vm_uuid=a.vm_uuid)] == [
        stop.job_uuid, a.job_uuid]
    assert [j["uuid"] for j in services.jobs.list(name="stop")] == [stop.job_uuid]
    assert [j["uuid"] for j in services.jobs.list(limit=1, offset=1)] == [b.job_uuid]
    assert services.jobs.vms_with_unfinished_jobs() == [a.vm_uuid, b.vm_uuid]
    settle(services)
    assert services.jobs.vms_with_unfinished_jobs() == []
    assert services.jobs.list(execution="queued") == []


def test_a_rebuilt_job_view_equals_the_live_one_row_for_row(services):
    a_mix_of_commands_and_jobs(services)
    live = rows(services, "job_view")
    assert {r["execution"] for r in live} == {"succeeded", "failed", "canceled"}
    services.projections.rebuild(["job_view"])
    assert rows(services, "job_view") == live
