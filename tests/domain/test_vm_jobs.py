"""The Vm aggregate's job queue, given events -> when a command -> then events (or a
refusal): the ticket and the lease of the head job, canceling, and a destroy ahead of the
other jobs. Split from test_vm.py, whose ``claim`` starts the head job.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.errors import JobNotRunnableError
from domain.states import Action, DesiredState, Execution, JobName, VmState
from tests.builders import LEASE, T0, cause, queue, recorded, run_head_job, vm_in
from tests.domain.test_vm import claim

# -- the ticket and the lease -------------------------------------------------------------


def test_only_the_head_job_may_start():
    vm = vm_in(VmState.RUNNING)
    first = queue(vm, Action.STOP)
    second = queue(vm, Action.START)
    recorded(vm)
    with pytest.raises(JobNotRunnableError, match="head"):
        vm.start_job(second, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    assert recorded(vm) == []
    vm.start_job(first, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    assert recorded(vm) == ["JobStarted"]
    assert vm.head_job["execution"] == Execution.RUNNING and vm.head_job["attempt"] == 1


def test_a_second_claim_of_a_running_job_with_an_unexpired_lease_is_refused():
    vm = vm_in(VmState.PROVISIONING)
    job_uuid = claim(vm, "w1")
    recorded(vm)
    just_before_expiry = T0 + LEASE - timedelta(milliseconds=1)
    with pytest.raises(JobNotRunnableError, match="leased by w1"):
        vm.start_job(job_uuid, worker="w2", now=just_before_expiry,
                     lease_expires_at=just_before_expiry + LEASE, cause=cause())
    assert recorded(vm) == []
    assert vm.head_job["worker"] == "w1"


def test_a_running_job_whose_lease_expired_is_taken_over_at_the_next_attempt():
    vm = vm_in(VmState.PROVISIONING)
    job_uuid = claim(vm, "w1")
    recorded(vm)
    later = T0 + LEASE + timedelta(seconds=1)
    vm.start_job(job_uuid, worker="w2", now=later, lease_expires_at=later + LEASE, cause=cause())
    assert recorded(vm) == ["JobStarted"]
    assert vm.head_job["worker"] == "w2" and vm.head_job["attempt"] == 2


@pytest.mark.parametrize("command", ["record_step", "succeed_job", "fail_job"])
def test_a_worker_whose_job_was_taken_over_can_no_longer_advance_it(command):
    vm = vm_in(VmState.PROVISIONING)
    job_uuid = claim(vm, "w1")
    later = T0 + LEASE + timedelta(seconds=1)
    vm.start_job(job_uuid, worker="w2", now=later, lease_expires_at=later + LEASE, cause=cause())
    recorded(vm)
    calls = {
        "record_step": lambda w: vm.record_step(job_uuid, {"name": "place"}, cause=cause(),
                                                worker=w),
        "succeed_job": lambda w: vm.succeed_job(job_uuid, cause=cause(), worker=w),
        "fail_job": lambda w: vm.fail_job(job_uuid, "boom", cause=cause(), worker=w),
    }
    with pytest.raises(JobNotRunnableError, match="taken over by w2"):
        calls[command]("w1")
    assert recorded(vm) == []
    calls[command]("w2")
    assert len(recorded(vm)) == 1


@pytest.mark.parametrize("command", ["record_step", "succeed_job", "fail_job"])
def test_a_job_that_has_not_started_cannot_be_advanced(command):
    vm = vm_in(VmState.PROVISIONING)
    job_uuid = vm.head_job["uuid"]
    with pytest.raises(JobNotRunnableError, match="not the running head job"):
        {
            "record_step": lambda: vm.record_step(job_uuid, {"name": "x"}, cause=cause()),
            "succeed_job": lambda: vm.succeed_job(job_uuid, cause=cause()),
            "fail_job": lambda: vm.fail_job(job_uuid, "boom", cause=cause()),
        }[command]()
    assert recorded(vm) == []


def test_a_finished_job_leaves_the_queue_and_the_next_one_gets_the_ticket():
    vm = vm_in(VmState.RUNNING)
    first, second = queue(vm, Action.STOP), queue(vm, Action.START)
    claim(vm)
    vm.fail_job(first, "no", cause=cause(), worker="w1")
    assert recorded(vm)[-1] == "JobFailed"
    assert vm.head_job["uuid"] == second and vm.head_job["execution"] == "queued"


# -- cancel ----------------------------------------------------------------------------------


def test_a_queued_job_can_be_canceled_and_leaves_the_queue():
    vm = vm_in(VmState.RUNNING)
    running, waiting = queue(vm, Action.STOP), queue(vm, Action.START)
    claim(vm)
    recorded(vm)
    vm.cancel_job(waiting, "changed my mind", cause=cause())
    # the start's ask withdrawn: the running stop's holds (domain/desire.py)
    assert recorded(vm) == ["JobCanceled", "DesiredStateSet"]
    assert vm.desired_state is DesiredState.STOPPED
    assert [j["uuid"] for j in vm.active_jobs] == [running]


def test_a_running_job_cannot_be_canceled():
    vm = vm_in(VmState.PROVISIONING)
    job_uuid = claim(vm)
    recorded(vm)
    with pytest.raises(JobNotRunnableError, match="only a queued job"):
        vm.cancel_job(job_uuid, "no", cause=cause())
    assert recorded(vm) == []


def test_an_unknown_or_finished_job_cannot_be_canceled():
    vm = vm_in(VmState.RUNNING)
    with pytest.raises(JobNotRunnableError):
        vm.cancel_job("00000000-0000-4000-8000-000000000000", "no", cause=cause())
    assert recorded(vm) == []


def test_cancel_queued_cancels_every_job_not_started_in_queue_order_and_leaves_the_running():
    vm = vm_in(VmState.RUNNING)
    running = queue(vm, Action.STOP)
    waiting = [queue(vm, Action.START), queue(vm, Action.REBOOT)]
    claim(vm)
    recorded(vm)
    assert vm.cancel_queued("the VM was quarantined", cause=cause()) == waiting
    # the start's ask gives way to the reboot's, the reboot's to the running stop's
    assert recorded(vm) == ["JobCanceled", "JobCanceled", "DesiredStateSet"]
    assert [j["uuid"] for j in vm.active_jobs] == [running]
    assert vm.cancel_queued("again", cause=cause()) == [] and recorded(vm) == []


def test_cancel_queued_by_name_cancels_only_the_jobs_of_that_name():
    vm = vm_in(VmState.PROVISIONING)  # its provision is queued
    provision = vm.head_job["uuid"]
    destroy = queue(vm, Action.DESTROY)
    recorded(vm)
    assert vm.cancel_queued("canceled by a DeleteVm", cause=cause(),
                            name=JobName.PROVISION) == [provision]
    assert [j["uuid"] for j in vm.active_jobs] == [destroy]


def test_a_canceled_queued_provision_takes_the_jobs_queued_behind_it_but_a_fence_job():
    # a v2 DeleteVm's cancel: the VM is then destroyed unplaced, so a stop behind the
    # provision could only fail; a fence job is owed to an earlier cancel and stays
    vm = vm_in(VmState.PROVISIONING)  # its provision is queued
    provision = vm.head_job["uuid"]
    behind = [queue(vm, Action.STOP), queue(vm, Action.UPDATE, alias="a")]
    fence = vm.queue_fence({"canceled_job_uuid": "earlier", "servers": [], "macs": []},
                           cause=cause())
    recorded(vm)
    assert vm.cancel_queued_provision("canceled by a DeleteVm", cause=cause()) == [
        provision, *behind]
    # the stop's ask withdrawn: the VM is desired running as a provisioning VM is
    assert recorded(vm) == ["JobCanceled", "JobCanceled", "DesiredStateSet", "JobCanceled"]
    assert vm.desired_state is DesiredState.RUNNING
    assert [j["uuid"] for j in vm.active_jobs] == [fence]
    assert vm.cancel_queued_provision("again", cause=cause()) == [] and recorded(vm) == []


# -- a destroy ahead --------------------------------------------------------------------------


def test_active_destroy_is_the_destroy_job_queued_or_running_while_it_is_active():
    """What every job queued now waits behind (api.md: version 2 refuses an action that
    could only fail there)."""
    vm = vm_in(VmState.RUNNING)
    assert vm.active_destroy is None
    queue(vm, Action.STOP)
    assert vm.active_destroy is None
    destroy = queue(vm, Action.DESTROY)
    queue(vm, Action.START)  # version 1 still queues it, behind the destroy
    assert (vm.active_destroy["uuid"], vm.active_destroy["execution"]) == (destroy, "queued")
    run_head_job(vm, lambda v: v.record_stopped(cause=cause()))
    claim(vm)
    assert (vm.active_destroy["uuid"], vm.active_destroy["execution"]) == (destroy, "running")
    vm.fail_job(destroy, "server unreachable", cause=cause())
    assert vm.active_destroy is None  # a failed destroy leaves the VM as it was
    assert vm.head_job["name"] == "start"


def test_a_destroy_canceled_with_the_queue_is_no_longer_ahead():
    vm = vm_in(VmState.RUNNING)
    queue(vm, Action.DESTROY)
    vm.record_quarantined("troubleshooting", cause=cause())
    assert vm.active_destroy is None
