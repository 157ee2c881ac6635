"""The desired state never keeps an ask that failed (domain/desire.py; docs/jobs.md, "The
desired state"): a job that asked for a state and ended without doing it (failed, canceled)
has its ask withdrawn, unless a newer ask is pending."""

from __future__ import annotations

import pytest

from domain.lifecycle import CANCELED_WHILE_RUNNING
from domain.states import Action, DesiredState, VmState
from domain.vm import Vm
from tests.builders import LEASE, T0, cause, new_vm, queue, recorded, run_head_job, vm_in

SERVER = "8b9a0ee4-0000-4000-8000-000000000001"

R, S, D = DesiredState.RUNNING, DesiredState.STOPPED, DesiredState.DESTROYED


def _vm_in(state: VmState) -> Vm:
    """A VM in ``state``; a failed one failed running on its server (its host rebooted)."""
    if state is not VmState.FAILED:
        return vm_in(state)
    vm = vm_in(VmState.RUNNING)
    vm.record_failed("host_reboot", "reported by its agent", cause=cause())
    vm.collect_events()
    return vm


def _claimed(vm: Vm, action: Action) -> str:
    """Queue ``action``'s job and have worker w1 claim it (it must be the head); its uuid."""
    job_uuid = queue(vm, action)
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    return job_uuid


def _fail_head(vm: Vm, record: object = None) -> None:
    """Claim the head job and end it failed (``record(vm)`` first, as a job's outcome)."""
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    if callable(record):
        record(vm)
    vm.collect_events()
    vm.fail_job(job_uuid, "injected", cause=cause(), worker="w1")


# the VM's state, the action whose job fails, the desire while it is queued, the desire after
@pytest.mark.parametrize("state, action, asked, after", [
    (VmState.RUNNING, Action.STOP, S, R),
    (VmState.RUNNING, Action.KILL, S, R),
    (VmState.STOPPED, Action.START, R, S),
    (VmState.RUNNING, Action.REBOOT, R, R),
    (VmState.RUNNING, Action.DESTROY, D, R),
    (VmState.STOPPED, Action.DESTROY, D, S),
    (VmState.FAILED, Action.DESTROY, D, R),
    (VmState.FAILED, Action.STOP, S, R),
])
def test_a_failed_job_withdraws_what_it_asked_for(state, action, asked, after):
    vm = _vm_in(state)
    queue(vm, action)
    assert vm.desired_state is asked
    _fail_head(vm)
    assert vm.desired_state is after
    changed = ["DesiredStateSet"] if after is not asked else []
    assert recorded(vm) == ["JobFailed", *changed]


def test_the_withdrawal_says_which_job_failed_and_a_fold_of_the_log_has_it():
    vm = new_vm()
    run_head_job(vm, lambda v: v.record_provisioned(SERVER, cause=cause()))
    stop = _claimed(vm, Action.STOP)
    vm.fail_job(stop, "injected", cause=cause(), worker="w1")
    events = vm.collect_events()  # every event since its creation
    assert [type(e).__name__ for e in events[-2:]] == ["JobFailed", "DesiredStateSet"]
    assert events[-1].desired_state == "running"
    assert stop in events[-1].reason and "failed" in events[-1].reason
    folded = None
    for event in events:  # as a load or a read model folds the stored log
        folded = event.mutate(folded)
    assert (folded.state, folded.desired_state) == (VmState.RUNNING, R)


def test_a_failed_provision_leaves_a_failed_vm_that_should_run():
    vm = new_vm()
    _fail_head(vm, lambda v: v.record_provision_failed("no room", cause=cause(),
                                                       copy_may_be_on=[]))
    assert (vm.state, vm.desired_state) == (VmState.FAILED, R)
    assert recorded(vm) == ["JobFailed"]


def test_a_reboot_that_failed_as_its_guest_shut_the_vm_down_leaves_it_desired_stopped():
    # row R4: the guest ended the run the reboot was to end; the VM is stopped as it is
    vm = vm_in(VmState.RUNNING)
    queue(vm, Action.REBOOT)
    _fail_head(vm, lambda v: v.record_stopped(cause=cause()))
    assert (vm.state, vm.desired_state) == (VmState.STOPPED, S)


def test_a_newer_ask_queued_behind_the_failed_job_stands():
    vm = vm_in(VmState.RUNNING)
    queue(vm, Action.STOP)
    queue(vm, Action.UPDATE, alias="x")  # asks for no state
    queue(vm, Action.START)
    _fail_head(vm)
    assert vm.desired_state is R
    assert recorded(vm) == ["JobFailed"]
    queue(vm, Action.STOP)  # the start's ask is the older now
    _fail_head(vm)  # the update
    assert vm.desired_state is S
    assert recorded(vm) == ["JobFailed"]


def test_a_canceled_queued_job_withdraws_its_ask_to_the_running_one_before_it():
    vm = vm_in(VmState.STOPPED)
    _claimed(vm, Action.START)
    queue(vm, Action.STOP)
    queue(vm, Action.DESTROY)
    vm.collect_events()
    vm.cancel_queued("canceled by a test", cause=cause())
    # the stop went (the destroy's ask was newer), then the destroy (the start's ask holds)
    assert vm.desired_state is R
    vm.cancel_running("canceled by a test", cause=cause())
    assert vm.desired_state is S


@pytest.mark.parametrize("state, action, after", [
    (VmState.RUNNING, Action.STOP, R),
    (VmState.STOPPED, Action.START, S),
    (VmState.RUNNING, Action.REBOOT, R),
])
def test_a_quarantine_that_cancels_a_running_job_withdraws_its_ask(state, action, after):
    vm = vm_in(state)
    _claimed(vm, action)
    vm.record_quarantined("operator", cause=cause())
    assert vm.desired_state is after
    vm.record_released(cause=cause())
    assert (vm.state, vm.desired_state) == (state, after)


def test_a_quarantine_of_a_provisioning_vm_keeps_it_desired_running():
    vm = new_vm()
    vm.record_quarantined("stuck", cause=cause())
    assert vm.desired_state is R
    assert "DesiredStateSet" not in recorded(vm)


@pytest.mark.parametrize("action, event, desired", [
    (Action.STOP, "Stopped", S), (Action.REBOOT, "Rebooted", R)])
def test_a_canceled_jobs_effect_adopted_by_its_fence_job_sets_its_ask_again(
        action, event, desired):
    vm = vm_in(VmState.RUNNING)
    job_uuid = _claimed(vm, action)
    vm.record_quarantined("operator", cause=cause())
    vm.record_adopted_while_quarantined(event, cause=cause())
    vm.adopt_ask(action.value, job_uuid, cause=cause())
    assert vm.desired_state is desired
    vm.record_released(cause=cause())
    assert vm.desired_state is desired


def test_an_adopted_ask_gives_way_to_a_newer_one_queued_since():
    vm = vm_in(VmState.RUNNING)
    stop = _claimed(vm, Action.STOP)
    vm.record_quarantined("operator", cause=cause())
    vm.record_released(cause=cause())
    queue(vm, Action.START)
    vm.collect_events()
    vm.adopt_ask("stop", stop, cause=cause())
    assert vm.desired_state is R
    assert recorded(vm) == []


def test_a_job_that_asks_for_no_state_changes_no_desire_when_it_fails():
    vm = vm_in(VmState.STOPPED)
    queue(vm, Action.UPDATE, alias="x")
    _fail_head(vm)
    assert vm.desired_state is S
    assert recorded(vm) == ["JobFailed"]


def test_a_running_job_canceled_by_a_quarantine_names_itself_in_the_withdrawal():
    vm = vm_in(VmState.RUNNING)
    stop = _claimed(vm, Action.STOP)
    vm.collect_events()
    vm.record_quarantined("operator", cause=cause())
    events = vm.collect_events()
    names = [type(e).__name__ for e in events]
    assert names[:2] == ["JobCanceled", "DesiredStateSet"]
    assert events[0].reason == CANCELED_WHILE_RUNNING
    assert stop in events[1].reason and "canceled" in events[1].reason
