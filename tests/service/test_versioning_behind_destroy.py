"""An action asked while the VM's destroy is queued or running (api.md, "Contract: DeleteVm
and actions"): version 2 refuses what could only fail behind the destroy
(``VmBeingDestroyedError``, naming the destroy job), version 1 queues it as VMAPI does."""

from __future__ import annotations

import pytest

from domain.errors import (
    InvalidTransitionError,
    UnallocatedVmError,
    VmAlreadyDestroyedError,
    VmBeingDestroyedError,
)
from domain.states import Action, JobName, VmState
from service.commands.nic_actions import refuse_nic_change
from service.commands.versioning import Behaviour, IfAlready, JobPlan

VM = "5f0c1b9e-0000-4000-8000-000000000001"
DESTROY = "d3570000-0000-4000-8000-000000000001"
V1, V2 = Behaviour("1.0.0"), Behaviour("2.0.0")
REFUSALS = (InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError,
            VmBeingDestroyedError)

# the actions a job carries out, which run after the destroy ahead of them
BEHIND = [Action.START, Action.STOP, Action.KILL, Action.REBOOT, Action.UPDATE]


def destroy_job(execution: str = "queued") -> dict:
    """The destroy job as ``Vm.active_destroy`` gives it."""
    return {"uuid": DESTROY, "name": "destroy", "params": {"args": {}}, "execution": execution}


@pytest.mark.parametrize("execution", ["queued", "running"])
@pytest.mark.parametrize("action", BEHIND, ids=str)
def test_v2_refuses_an_action_behind_a_destroy_naming_the_destroy_job(action, execution):
    with pytest.raises(VmBeingDestroyedError) as refused:
        V2.admit(VmState.RUNNING, action, vm_uuid=VM, destroy_job=destroy_job(execution))
    error = refused.value
    assert (error.state, error.action, error.destroy_job_uuid, error.execution) == (
        "running", action.value, DESTROY, execution)
    assert str(error) == (f"Cannot {action.value} a VM being destroyed: its destroy job "
                          f"{DESTROY} is {execution}")
    # only what version 2 would take now: the destroy (its repeat) and the quarantine
    assert error.allowed_actions == ["destroy", "quarantine"]


@pytest.mark.parametrize("action", BEHIND, ids=str)
def test_v1_queues_an_action_behind_a_destroy_as_vmapi_does(action):
    plan = V1.admit(VmState.RUNNING, action, vm_uuid=VM, destroy_job=destroy_job())
    assert isinstance(plan, JobPlan) and not plan.destroy_now


@pytest.mark.parametrize("behaviour", [V1, V2], ids=["v1", "v2"])
def test_a_delete_behind_a_destroy_is_still_taken(behaviour):
    # a repeat answers the destroy job; another destroy finds its target holding
    plan = behaviour.admit(VmState.RUNNING, Action.DESTROY, vm_uuid=VM,
                           destroy_job=destroy_job())
    assert plan.if_already is IfAlready.SUCCEED


@pytest.mark.parametrize("action", BEHIND, ids=str)
def test_v2_refuses_an_action_behind_the_destroy_of_a_provisioning_vm(action):
    """The race a tester named: a v2 DELETE canceled the queued provision and queued its
    destroy; an action landing after it used to be queued behind the destroy, and failed
    there ("Cannot start a VM in state 'destroyed'")."""
    with pytest.raises(VmBeingDestroyedError) as refused:
        V2.admit(VmState.PROVISIONING, action, vm_uuid=VM, has_server=False,
                 destroy_job=destroy_job())
    assert refused.value.allowed_actions == ["destroy", "quarantine"]
    with pytest.raises(UnallocatedVmError):  # version 1 as before: VMAPI's refusal
        V1.admit(VmState.PROVISIONING, action, vm_uuid=VM, has_server=False,
                 destroy_job=destroy_job())


@pytest.mark.parametrize(("refuse", "allowed"), [
    # a reboot of a stopped VM is impossible whatever is queued: the state is asked first
    (lambda: V2.admit(VmState.STOPPED, Action.REBOOT, vm_uuid=VM, destroy_job=destroy_job()),
     ["destroy", "quarantine"]),
    (lambda: V2.admit(VmState.QUARANTINED, Action.START, vm_uuid=VM,
                      destroy_job=destroy_job()),
     ["destroy", "quarantine", "release"]),
    # the release queues no job, but its refusal names what version 2 takes now
    (lambda: V2.require(VmState.RUNNING, Action.RELEASE, has_server=True,
                        destroy_job=destroy_job()),
     ["destroy", "quarantine"]),
    # version 1 lists what it lists of a running VM: it queues each behind the destroy
    (lambda: V1.require(VmState.RUNNING, Action.RELEASE, has_server=True,
                        destroy_job=destroy_job()),
     V1.allowed_actions(VmState.RUNNING, has_server=True)),
], ids=["v2-reboot-of-stopped", "v2-start-of-quarantined", "v2-release", "v1-release"])
def test_a_refusal_by_state_comes_first_naming_what_the_version_takes(refuse, allowed):
    with pytest.raises(InvalidTransitionError) as refused:
        refuse()
    assert refused.value.allowed_actions == allowed


@pytest.mark.parametrize("has_server", [True, False], ids=["on a server", "on none"])
@pytest.mark.parametrize("state", list(VmState), ids=str)
@pytest.mark.parametrize("behaviour", [V1, V2], ids=["v1", "v2"])
def test_a_version_lists_exactly_what_it_admits_behind_a_destroy(behaviour, state, has_server):
    listed = behaviour.allowed_actions(state, has_server=has_server, destroy_job=destroy_job())
    for action in Action:
        admitted = _admitted(behaviour, state, action, has_server)
        assert (action.value in listed) is admitted, (action, listed)
    for name in (JobName.ADD_NICS, JobName.REMOVE_NICS):
        try:
            refuse_nic_change(state, has_server, name, behaviour, destroy_job=destroy_job())
        except REFUSALS:
            assert name.value not in listed
        else:
            assert name.value in listed


def _admitted(behaviour: Behaviour, state: VmState, action: Action, has_server: bool) -> bool:
    try:
        behaviour.admit(state, action, vm_uuid=VM, has_server=has_server,
                        destroy_job=destroy_job())
    except REFUSALS:
        return False
    return True


@pytest.mark.parametrize("name", [JobName.ADD_NICS, JobName.REMOVE_NICS], ids=str)
def test_a_nic_change_behind_a_destroy_is_refused_in_v2_and_taken_in_v1(name):
    refuse_nic_change(VmState.RUNNING, True, name, V1, destroy_job=destroy_job())
    with pytest.raises(VmBeingDestroyedError) as refused:
        refuse_nic_change(VmState.RUNNING, True, name, V2, destroy_job=destroy_job("running"))
    assert (refused.value.action, refused.value.execution) == (name.value, "running")
    assert refused.value.allowed_actions == ["destroy", "quarantine"]
