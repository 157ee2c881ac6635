"""When a VM is stuck (domain/stuck.py): a transient state is timed from when the VM entered
it, the one rule the read model's ``since`` follows too."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from eventsourcing.domain import Snapshot
from eventsourcing.utils import get_topic

from domain.instants import rfc3339
from domain.states import Action, VmState
from domain.stuck import StuckThresholds, in_state_since, starts_anew, stuck_reason
from domain.vm import Vm
from tests.builders import cause, new_vm, queue, run_head_job, vm_in

LIMIT = StuckThresholds(transient_s=60)


def test_a_vm_given_back_still_provisioning_is_timed_from_its_release(monkeypatch):
    vm = new_vm()
    assert in_state_since(vm) == vm.created_on
    assert stuck_reason(vm, vm.created_on + timedelta(seconds=61), LIMIT) is not None
    vm.record_quarantined("look at it", cause=cause("operator"))
    released_at = vm.created_on + timedelta(seconds=120)
    monkeypatch.setattr(Vm.Released, "create_timestamp", staticmethod(lambda: released_at))
    vm.record_released(cause=cause("operator"))
    assert vm.state == VmState.PROVISIONING and in_state_since(vm) == released_at
    assert stuck_reason(vm, released_at + timedelta(seconds=59), LIMIT) is None
    reason = stuck_reason(vm, released_at + timedelta(seconds=61), LIMIT)
    # written as the API writes instants (an operator tester saw "...21.934675+00:00")
    assert reason is not None and f"since {rfc3339(released_at)} " in reason
    assert re.search(r"since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", reason), reason


def test_a_hung_jobs_reason_writes_its_start_as_the_api_does():
    vm = vm_in(VmState.RUNNING)
    job_uuid = queue(vm, Action.STOP)
    started = datetime(2026, 12, 6, 7, 22, 21, 934675, tzinfo=UTC)
    vm.start_job(job_uuid, worker="w1", now=started, lease_expires_at=started, cause=cause())
    vm.active_jobs[0]["started_at"] = started.isoformat()
    reason = stuck_reason(vm, started + timedelta(hours=2), StuckThresholds(job_s=60))
    assert reason == (f"job {job_uuid} (stop) running since 2026-12-06T07:22:21.934Z "
                      "(more than 60 s)")


def test_only_a_change_of_state_starts_the_time_in_it_anew():
    vm = vm_in(VmState.RUNNING)
    since = in_state_since(vm)
    queue(vm, Action.REBOOT)
    run_head_job(vm, lambda v: v.record_rebooted(cause=cause()))  # stays running
    assert in_state_since(vm) == since
    queue(vm, Action.STOP)
    run_head_job(vm, lambda v: v.record_stopped(cause=cause()))
    assert in_state_since(vm) > since
    assert not starts_anew("running", "running") and starts_anew("quarantined", "provisioning")


def test_a_snapshot_taken_before_vms_kept_state_since_thaws_timed_from_creation():
    vm = vm_in(VmState.RUNNING)
    state = Snapshot.take(vm).state
    assert state["class_version"] == 6
    # as version 1 took it (and without the fields versions 3 to 6 added)
    del state["state_since"], state["lost_copy"], state["node_seen"], state["class_version"]
    del state["addresses_kept"], state["copy_may_be_on"], state["claimed_servers"]
    thawed = Snapshot(originator_id=vm.id, originator_version=vm.version,
                      timestamp=vm.modified_on, topic=get_topic(Vm), state=state).mutate(None)
    assert thawed.state_since is None and thawed.lost_copy is None and thawed.node_seen is None
    assert thawed.addresses_kept is False and thawed.copy_may_be_on == []
    assert thawed.claimed_servers == [vm.server_uuid]  # every server it names
    assert in_state_since(thawed) == vm.created_on


def test_a_snapshot_with_state_since_but_no_class_version_keeps_it():
    vm = vm_in(VmState.RUNNING)
    state = Snapshot.take(vm).state
    del state["class_version"]  # taken after state_since was kept, before it was numbered
    thawed = Snapshot(originator_id=vm.id, originator_version=vm.version,
                      timestamp=vm.modified_on, topic=get_topic(Vm), state=state).mutate(None)
    assert thawed.state_since == vm.state_since
