"""An update made on a version whose alias, metadata and tags do not show a pending update
(``Vm.require_updates_applied``; docs/api.md, "Contract: concurrency and idempotency"): the
version moves when an update job is queued, its changes only when it succeeds, so a client
that read the VM in between holds a current version beside stale fields."""

from __future__ import annotations

import pytest

from domain.errors import UpdatePendingError, VersionMismatchError
from domain.states import Action, Execution, VmState
from tests.builders import LEASE, T0, cause, queue, recorded, vm_in


def test_no_update_pending_refuses_nothing():
    vm = vm_in(VmState.RUNNING)
    queue(vm, Action.STOP)  # other jobs do not change what an update replaces
    recorded(vm)
    vm.require_updates_applied()
    assert recorded(vm) == []


def test_a_queued_update_is_named_at_the_current_version():
    vm = vm_in(VmState.RUNNING)
    job_uuid = queue(vm, Action.UPDATE, tags={"a": "1"})
    recorded(vm)
    with pytest.raises(UpdatePendingError) as refused:
        vm.require_updates_applied()
    assert refused.value.pending_job_uuid == job_uuid
    assert refused.value.execution == Execution.QUEUED
    assert refused.value.current == refused.value.expected == vm.version
    assert isinstance(refused.value, VersionMismatchError)  # a failed precondition, 412
    assert recorded(vm) == []


def test_a_running_update_is_pending_until_it_succeeds():
    vm = vm_in(VmState.RUNNING)
    job_uuid = queue(vm, Action.UPDATE, tags={"a": "1"})
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    with pytest.raises(UpdatePendingError, match=f"{job_uuid} is running") as refused:
        vm.require_updates_applied()
    assert refused.value.execution == Execution.RUNNING
    # its changes are recorded in the save that ends it: from then on they show
    vm.update_metadata({"tags": {"a": "1"}}, cause=cause())
    vm.succeed_job(job_uuid, cause=cause(), worker="w1")
    assert vm.tags == {"a": "1"}
    vm.require_updates_applied()


def test_the_first_of_several_pending_updates_is_named():
    vm = vm_in(VmState.RUNNING)
    first = queue(vm, Action.UPDATE, tags={"a": "1"})
    queue(vm, Action.STOP)
    queue(vm, Action.UPDATE, tags={"b": "1"})
    with pytest.raises(UpdatePendingError) as refused:
        vm.require_updates_applied()
    assert refused.value.pending_job_uuid == first


def test_an_update_that_failed_or_was_canceled_is_pending_no_more():
    vm = vm_in(VmState.RUNNING)
    failed = queue(vm, Action.UPDATE, tags={"a": "1"})
    vm.start_job(failed, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    vm.fail_job(failed, "no", cause=cause(), worker="w1")
    canceled = queue(vm, Action.UPDATE, tags={"b": "1"})
    vm.cancel_job(canceled, "not wanted", cause=cause())
    assert vm.active_jobs == []
    vm.require_updates_applied()
