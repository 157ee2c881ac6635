"""The Vm aggregate's lifecycle facts, given events -> when a fact -> then events (or a
refusal): the state machine's refusals, the quarantine and its release, the servers a copy may
be on, what ends a VM's active jobs, a copy a host reboot took, and what a refusal says of the
VM's server."""

from __future__ import annotations

import uuid

import pytest

from domain.errors import IllegalTransitionError, JobNotRunnableError
from domain.rules import Verdict, verdict
from domain.states import Action, VmState
from domain.vm import QUARANTINE_OWNER_UUID, Vm
from tests.builders import OWNER, cause, new_vm, queue, recorded, run_head_job, vm_in
from tests.domain.test_vm import claim

# -- lifecycle facts -------------------------------------------------------------------------


def test_a_lifecycle_fact_the_state_machine_forbids_is_refused_and_records_nothing():
    vm = vm_in(VmState.DESTROYED)
    with pytest.raises(IllegalTransitionError):
        vm.record_started(cause=cause())
    with pytest.raises(IllegalTransitionError):
        vm.record_provisioned("s", cause=cause())
    assert recorded(vm) == []


@pytest.mark.parametrize("state", [VmState.PROVISIONING, VmState.RUNNING, VmState.STOPPED,
                                   VmState.FAILED], ids=str)
def test_quarantine_and_release_give_the_vm_back_to_its_owner_in_its_state(state):
    vm = vm_in(state)
    vm.record_quarantined("stuck for 2h", cause=cause("operator"))
    assert vm.state is VmState.QUARANTINED
    assert vm.owner_uuid == QUARANTINE_OWNER_UUID
    assert vm.quarantine["previous_owner_uuid"] == OWNER
    assert vm.quarantine["reason"] == "stuck for 2h"
    vm.record_released(cause=cause("operator"))
    canceled = ["JobCanceled"] if state is VmState.PROVISIONING else []  # its provision
    assert recorded(vm) == [*canceled, "Quarantined", "Released"]
    assert vm.state == state and vm.owner_uuid == OWNER and vm.quarantine is None


@pytest.mark.parametrize(("state", "event", "given_back"), [
    (VmState.RUNNING, "Stopped", VmState.STOPPED), (VmState.RUNNING, "Rebooted",
                                                    VmState.RUNNING),
    (VmState.STOPPED, "Started", VmState.RUNNING), (VmState.FAILED, "Started", VmState.RUNNING),
], ids=["stop", "reboot", "start", "start-failed"])
def test_what_a_canceled_job_did_adopted_while_quarantined_is_the_state_given_back(
        state, event, given_back):
    vm = vm_in(state)
    vm.record_quarantined("disk errors", cause=cause("operator"))
    recorded(vm)
    vm.record_adopted_while_quarantined(event, cause=cause("fence"))
    assert recorded(vm) == [event]
    assert vm.state is VmState.QUARANTINED  # still taken from its owner
    vm.record_released(cause=cause("operator"))
    assert vm.state == given_back


@pytest.mark.parametrize(("state", "event"), [
    (VmState.STOPPED, "Stopped"), (VmState.STOPPED, "Rebooted"), (VmState.RUNNING, "Started"),
    (VmState.RUNNING, "Failed")], ids=["stop-stopped", "reboot-stopped", "start-running",
                                       "not-adoptable"])
def test_an_adopted_event_that_does_not_follow_the_state_given_back_is_refused(state, event):
    vm = vm_in(state)
    vm.record_quarantined("disk errors", cause=cause("operator"))
    recorded(vm)
    with pytest.raises(IllegalTransitionError):
        vm.record_adopted_while_quarantined(event, cause=cause("fence"))
    assert recorded(vm) == []


def test_only_a_quarantined_vm_adopts_and_no_other_writer_records_a_stop_on_one():
    vm = vm_in(VmState.RUNNING)
    with pytest.raises(IllegalTransitionError):
        vm.record_adopted_while_quarantined("Stopped", cause=cause("fence"))
    vm.record_quarantined("disk errors", cause=cause("operator"))
    recorded(vm)
    with pytest.raises(IllegalTransitionError):
        vm.record_stopped(cause=cause("agent"))
    assert recorded(vm) == []


def test_a_copy_may_be_on_the_vms_server_and_on_the_server_it_holds_a_claim_on():
    vm = new_vm()
    assert vm.copy_servers == []  # no compute node touched yet
    vm.claim_capacity("claimed", cause=cause())
    assert vm.copy_servers == ["claimed"]  # created there before the server is recorded
    run_head_job(vm, lambda v: v.record_provisioned("claimed", cause=cause()))
    assert vm.copy_servers == ["claimed"]  # each once
    vm.release_capacity(cause=cause())
    vm.claim_capacity("elsewhere", cause=cause())  # a start placing it anew
    assert vm.copy_servers == ["claimed", "elsewhere"]


@pytest.mark.parametrize(("end", "event", "waiting_reason", "running_reason"), [
    (lambda vm: vm.record_quarantined("disk errors", cause=cause("operator")), "Quarantined",
     "canceled: the VM was quarantined", "canceled: the VM was quarantined while the job ran"),
    (lambda vm: vm.record_destroyed_without_job(cause=cause("owner")), "Destroyed",
     "canceled: the VM was destroyed", "canceled: the VM was destroyed while the job ran"),
], ids=["quarantine", "destroy-without-a-job"])
def test_taking_the_vm_out_of_jobs_reach_ends_every_active_job_and_fences_the_running_one(
        end, event, waiting_reason, running_reason):
    vm = vm_in(VmState.RUNNING)
    running = queue(vm, Action.STOP)
    stop_params = vm.active_job(running)["params"]
    waiting = queue(vm, Action.START)
    claim(vm)
    recorded(vm)
    servers = vm.copy_servers
    end(vm)
    events = vm.collect_events()
    # each canceled job's ask withdrawn (domain/desire.py): the start's to the stop's, the
    # stop's to the running VM's
    assert [type(e).__name__ for e in events] == [
        "JobCanceled", "DesiredStateSet", "JobCanceled", "DesiredStateSet", event, "JobQueued"]
    reasons = {e.job_uuid: e.reason for e in events if type(e).__name__ == "JobCanceled"}
    assert reasons[waiting] == waiting_reason
    assert reasons[running].startswith(running_reason)
    # the running job's worker may still be in a compute call: a fence job raises the VM's
    # fence above its claim on every server a copy may be on (service/jobs/fence_job.py)
    [fence] = vm.active_jobs
    assert (fence["name"], fence["execution"]) == ("fence", "queued")
    # naming the canceled job, whose effect on the node it settles (fence_settle.py)
    assert fence["params"]["args"] == {"canceled_job_uuid": running, "servers": servers,
                                       "macs": [], "canceled_job": {
                                           "uuid": running, "name": "stop", "params": stop_params}}
    # its worker can record nothing more: not a step, not an outcome
    with pytest.raises(JobNotRunnableError):
        vm.record_step(running, {"name": "ensure_state"}, cause=cause(), worker="w1")
    with pytest.raises(JobNotRunnableError):
        vm.succeed_job(running, cause=cause(), worker="w1")


def test_a_quarantined_vm_refuses_a_metadata_update_as_the_rules_table_refuses_update():
    vm = vm_in(VmState.RUNNING)
    vm.record_quarantined("disk errors", cause=cause("operator"))
    recorded(vm)
    with pytest.raises(IllegalTransitionError):
        vm.update_metadata({"alias": "renamed"}, cause=cause())
    assert recorded(vm) == []
    assert verdict(VmState.QUARANTINED, Action.UPDATE, has_server=True) is Verdict.REFUSED


def test_release_of_a_vm_not_in_quarantine_is_refused():
    vm = vm_in(VmState.RUNNING)
    with pytest.raises(IllegalTransitionError):
        vm.record_released(cause=cause())
    assert recorded(vm) == []


# -- a copy a host reboot took ------------------------------------------------------------


def test_a_lost_copy_is_of_one_boot_of_one_server_and_a_report_listing_the_vm_clears_it():
    """CopyLost names the server and the boot id that took the copy (api.md, agent reports):
    only a report of that server under that boot id reads a missing VM as that reboot; a
    report of that server that lists the VM again (a copy an operator started by hand)
    records CopyFound, so a later report without it is an agent that forgot it."""
    vm = vm_in(VmState.STOPPED)
    assert vm.record_copy_lost("s1", "boot-2", cause=cause())
    assert vm.copy_lost_on("s1", "boot-2")
    assert not vm.copy_lost_on("s1", "boot-3") and not vm.copy_lost_on("s2", "boot-2")
    assert not vm.record_copy_found("s2", "boot-2", cause=cause())  # another server's
    assert recorded(vm) == ["CopyLost"]
    assert vm.record_copy_found("s1", "boot-2", cause=cause())
    assert recorded(vm) == ["CopyFound"]
    assert vm.lost_copy is None and not vm.copy_lost_on("s1", "boot-2")
    assert not vm.record_copy_found("s1", "boot-2", cause=cause())  # nothing left to clear


# -- refusals name the VM's own allowed actions -------------------------------------------


def _stopped_on_no_server() -> Vm:
    vm = Vm.discover(vm_uuid=uuid.uuid4(), state="stopped", server_uuid=None, owner_uuid=OWNER,
                     brand="bhyve", ram=512, cause=cause())
    vm.collect_events()
    return vm


def test_every_illegal_transition_says_whether_the_vm_is_on_a_server():
    """A refusal names the actions the VM allows (domain/rules.allowed_actions), which depend
    on whether it is on a server: every raiser says so, none leaves it to be assumed."""
    destroyed = vm_in(VmState.DESTROYED)
    for vm in (vm_in(VmState.STOPPED), _stopped_on_no_server(), destroyed):
        refusals = [lambda vm=vm: vm.record_released(cause=cause()),
                    lambda vm=vm: vm.record_rebooted(cause=cause())]
        if vm is destroyed:
            refusals += [lambda vm=vm: vm.claim_capacity("s1", cause=cause()),
                         lambda vm=vm: vm.update_metadata({"alias": "x"}, cause=cause())]
        for refuse in refusals:
            with pytest.raises(IllegalTransitionError) as refused:
                refuse()
            assert refused.value.has_server is vm.has_server
    assert _stopped_on_no_server().has_server is False
