"""API versions: negotiating ``Accept-Version``, and the v1/v2 behaviours of api.md's
"DeleteVm and actions: version 1 vs version 2" table (the rows decided by state)."""

from __future__ import annotations

import pytest

from domain.errors import InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError
from domain.rules import allowed_actions
from domain.states import Action, VmState
from service.commands.version_ranges import SUPPORTED_VERSIONS, InvalidVersionError, negotiate
from service.commands.versioning import NEWEST, OLDEST, Behaviour, IfAlready, JobPlan

VM = "5f0c1b9e-0000-4000-8000-000000000001"
V1, V2 = Behaviour("1.0.0"), Behaviour("2.0.0")


# -- negotiate -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "served"),
    [
        (None, "1.0.0"),
        ("1", "1.0.0"),
        ("~1", "1.0.0"),
        ("1.0.0", "1.0.0"),
        ("~2", "2.0.0"),
        ("2.x", "2.0.0"),
        ("*", "1.0.0"),
        (" * ", "1.0.0"),
        (">=1", "2.0.0"),
        (">1", "2.0.0"),
        ("<2", "1.0.0"),
        ("<=2", "2.0.0"),
        ("~9", "1.0.0"),
        ("9.x", "1.0.0"),
        ("9.16.0", "1.0.0"),
        ("^9.1", "1.0.0"),
        ("^2", "2.0.0"),
        ("1 || 2", "2.0.0"),
        ("2 || 1", "2.0.0"),
        ("1.x", "1.0.0"),
        ("~1.0", "1.0.0"),
        # a set of comparators joined by spaces: each must hold (node-semver; found by a new
        # user: ">=1 <2" was InvalidVersion)
        (">=1 <2", "1.0.0"),
        (">=1.0.0 <3.0.0", "2.0.0"),
        (">= 1 < 2", "1.0.0"),
        ("~9 >=9.1", "1.0.0"),
        (">=3 || >=1 <2", "1.0.0"),
        # node-semver's "~>" is its "~" (found by a tester: InvalidVersion)
        ("~>2", "2.0.0"),
        ("~> 2", "2.0.0"),
        ("~>1.0", "1.0.0"),
        ("~>9", "1.0.0"),
    ],
)
def test_negotiate_serves_the_newest_supported_version_the_range_allows(header, served):
    assert negotiate(header) == served


def test_no_header_gets_the_oldest_behaviour_which_never_changes():
    assert negotiate(None) == OLDEST.version == "1.0.0"
    assert negotiate("*") == OLDEST.version
    assert negotiate("~2") == NEWEST.version == "2.0.0"


@pytest.mark.parametrize("header", ["3", "~0", "garbage", "^3.1", "2.1.0", ">>1", "~9.17",
                                    ">9", "<1", ">=2 <2", ">=1 garbage", "~>3", "~>>2"])
def test_an_unsatisfiable_range_raises_invalid_version_with_the_supported_list(header):
    with pytest.raises(InvalidVersionError) as refused:
        negotiate(header)
    assert refused.value.requested == header
    assert refused.value.supported == list(SUPPORTED_VERSIONS) == ["1.0.0", "2.0.0"]
    assert "1.0.0, 2.0.0" in str(refused.value)


# Parts longer than int() reads (4,300 digits) were a 500 on every route (found by a new user).
@pytest.mark.parametrize("header, served", [
    ("9" * 4301, None), ("1." + "0" * 4400, "1.0.0"), ("0" * 5000 + "2", "2.0.0"),
    ("<" + "9" * 5000, "2.0.0"), ("~2." + "0" * 5000, "2.0.0"), (">=" + "9" * 5000, None),
])
def test_a_range_with_parts_of_any_length_is_served_or_refused_never_raising_else(header, served):
    if served is None:
        with pytest.raises(InvalidVersionError):
            negotiate(header)
    else:
        assert negotiate(header) == served


def test_answers_are_remembered_and_refusals_are_not():
    # negotiate runs on every request; its answers are cached, a bad header refused each time
    negotiate.cache_clear()
    assert negotiate("~2") == negotiate("~2") == "2.0.0"
    assert negotiate.cache_info().hits == 1
    for _ in range(2):
        with pytest.raises(InvalidVersionError):
            negotiate("~3")
    assert negotiate.cache_info().currsize == 1


# -- Behaviour.admit: one test per row of the table -----------------------------------------


@pytest.mark.parametrize("state", [VmState.RUNNING, VmState.STOPPED], ids=str)
@pytest.mark.parametrize("behaviour", [V1, V2], ids=["v1", "v2"])
def test_delete_of_a_vm_with_a_server_queues_a_destroy_job_in_both_versions(behaviour, state):
    plan = behaviour.admit(state, Action.DESTROY, vm_uuid=VM)
    assert isinstance(plan, JobPlan) and not plan.cancel_queued_provision


def test_v1_delete_of_a_vm_with_no_server_is_refused_as_vmapi_does():
    with pytest.raises(UnallocatedVmError) as refused:
        V1.admit(VmState.PROVISIONING, Action.DESTROY, vm_uuid=VM)
    assert str(refused.value) == "Cannot delete a VM with no server_uuid"


def test_v2_delete_of_a_vm_with_no_server_queues_behind_and_cancels_the_queued_provision():
    plan = V2.admit(VmState.PROVISIONING, Action.DESTROY, vm_uuid=VM)
    assert plan == JobPlan(if_already=IfAlready.SUCCEED, cancel_queued_provision=True)


def test_v1_delete_of_a_destroyed_vm_queues_a_job_that_succeeds_doing_nothing():
    plan = V1.admit(VmState.DESTROYED, Action.DESTROY, vm_uuid=VM)
    assert plan.if_already is IfAlready.SUCCEED and not plan.cancel_queued_provision


def test_v2_delete_of_a_destroyed_vm_is_refused_as_already_destroyed():
    with pytest.raises(VmAlreadyDestroyedError) as refused:
        V2.admit(VmState.DESTROYED, Action.DESTROY, vm_uuid=VM)
    assert refused.value.vm_uuid == VM


@pytest.mark.parametrize("behaviour", [V1, V2], ids=["v1", "v2"])
def test_delete_of_a_failed_vm_queues_a_destroy_job_in_both_versions(behaviour):
    assert behaviour.admit(VmState.FAILED, Action.DESTROY, vm_uuid=VM).if_already


@pytest.mark.parametrize("action", [Action.START, Action.STOP, Action.REBOOT], ids=str)
def test_v1_action_on_a_provisioning_vm_is_refused_as_unallocated(action):
    with pytest.raises(UnallocatedVmError) as refused:
        V1.admit(VmState.PROVISIONING, action, vm_uuid=VM)
    assert refused.value.action == action.value and refused.value.state == "provisioning"


@pytest.mark.parametrize("action", [Action.START, Action.STOP, Action.REBOOT], ids=str)
def test_v2_action_on_a_provisioning_vm_is_queued_behind_the_provision(action):
    plan = V2.admit(VmState.PROVISIONING, action, vm_uuid=VM)
    assert plan == JobPlan(if_already=IfAlready.SUCCEED, cancel_queued_provision=False)


@pytest.mark.parametrize(
    ("state", "action"),
    [(VmState.STOPPED, Action.STOP), (VmState.STOPPED, Action.KILL),
     (VmState.RUNNING, Action.START)],
    ids=["stop-on-stopped", "kill-on-stopped", "start-on-running"],
)
def test_v1_action_whose_target_already_holds_queues_a_job_that_fails(state, action):
    assert V1.admit(state, action, vm_uuid=VM).if_already is IfAlready.FAIL


@pytest.mark.parametrize(
    ("state", "action"),
    [(VmState.STOPPED, Action.STOP), (VmState.RUNNING, Action.START)],
    ids=["stop-on-stopped", "start-on-running"],
)
def test_v1_with_idempotent_or_v2_action_whose_target_holds_succeeds_doing_nothing(state, action):
    assert V1.admit(state, action, vm_uuid=VM, idempotent=True).if_already is IfAlready.SUCCEED
    assert V2.admit(state, action, vm_uuid=VM).if_already is IfAlready.SUCCEED


@pytest.mark.parametrize("behaviour", [V1, V2], ids=["v1", "v2"])
@pytest.mark.parametrize(
    ("state", "action"),
    [(VmState.DESTROYED, Action.START), (VmState.STOPPED, Action.REBOOT),
     (VmState.QUARANTINED, Action.STOP)],
    ids=["start-on-destroyed", "reboot-on-stopped", "stop-on-quarantined"],
)
def test_an_impossible_action_is_an_invalid_transition_in_both_versions(behaviour, state, action):
    with pytest.raises(InvalidTransitionError) as refused:
        behaviour.admit(state, action, vm_uuid=VM)
    assert refused.value.state == state.value
    assert refused.value.allowed_actions == behaviour.allowed_actions(state, has_server=True)
    assert set(refused.value.allowed_actions) <= set(allowed_actions(state, has_server=True))


@pytest.mark.parametrize("has_server", [True, False], ids=["on a server", "on none"])
@pytest.mark.parametrize("state", list(VmState), ids=str)
@pytest.mark.parametrize("behaviour", [V1, V2], ids=["v1", "v2"])
def test_a_version_lists_exactly_the_actions_it_admits(behaviour, state, has_server):
    """Found by a tester: a version 2 refusal on a destroyed VM listed destroy, which version
    2 refuses (VmAlreadyDestroyed), and version 1 listed start on a provisioning VM, which it
    refuses (UnallocatedVM): the list was the rules table's, not the version's."""
    listed = behaviour.allowed_actions(state, has_server=has_server)
    for action in Action:
        if action.value not in ("start", "stop", "kill", "reboot", "update", "destroy",
                                "quarantine", "release"):
            continue
        try:
            behaviour.admit(state, action, vm_uuid=VM, has_server=has_server)
        except (InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError):
            assert action.value not in listed, (action, listed)
        else:
            assert action.value in listed, (action, listed)


def test_the_lists_that_differ_by_version() -> None:
    assert V1.allowed_actions(VmState.DESTROYED, has_server=True) == ["destroy"]
    assert V2.allowed_actions(VmState.DESTROYED, has_server=True) == []
    assert V1.allowed_actions(VmState.PROVISIONING, has_server=False) == ["quarantine"]
    assert "destroy" not in V1.allowed_actions(VmState.RUNNING, has_server=False)
    assert "destroy" in V2.allowed_actions(VmState.RUNNING, has_server=False)


@pytest.mark.parametrize("state", [VmState.RUNNING, VmState.STOPPED, VmState.FAILED], ids=str)
@pytest.mark.parametrize("behaviour", [V1, V2], ids=["v1", "v2"])
def test_a_delete_job_finding_the_vm_already_destroyed_at_its_ticket_succeeds(behaviour, state):
    # The row "VM already destroyed: 202 job that succeeds doing nothing" (v1) must hold too
    # when the VM was destroyed by something else while the delete waited for its ticket.
    assert behaviour.admit(state, Action.DESTROY, vm_uuid=VM).if_already is IfAlready.SUCCEED


@pytest.mark.parametrize("state", [VmState.RUNNING, VmState.STOPPED, VmState.FAILED], ids=str)
def test_delete_of_a_vm_whose_server_was_removed_is_at_once_in_v2_and_a_job_in_v1(state):
    assert V2.admit(state, Action.DESTROY, vm_uuid=VM, server_removed=True).destroy_now
    assert not V1.admit(state, Action.DESTROY, vm_uuid=VM, server_removed=True).destroy_now
    assert not V2.admit(state, Action.DESTROY, vm_uuid=VM).destroy_now
    assert not V2.admit(state, Action.STOP if state is not VmState.STOPPED else Action.START,
                        vm_uuid=VM, server_removed=True).destroy_now


# -- ranges that admit any version ------------------------------------------------------------
# Found by a tester: "x" and "*" were served version 1, "x.x.x", "||" and "1 ||" version 2.
# node-semver (VMAPI's restify) reads each of these as "*": a wildcard major, with any
# operator but > and <, an empty alternative, and >=0 (its replaceGTE0). One such alternative
# makes the whole range "*", so it is version 1 as "*" is (api.md "Contract: versions").


@pytest.mark.parametrize(("header", "served"), [
    ("*", "1.0.0"), ("x", "1.0.0"), ("X", "1.0.0"), ("", "1.0.0"), ("   ", "1.0.0"),
    ("x.x.x", "1.0.0"), ("X.X", "1.0.0"), ("*.*.*", "1.0.0"), ("x.x", "1.0.0"),
    ("*.x.X", "1.0.0"), ("x.1.2", "1.0.0"), ("v*", "1.0.0"), ("=x", "1.0.0"),
    ("~x", "1.0.0"), ("^*", "1.0.0"), (">=*", "1.0.0"), ("<=x.x", "1.0.0"),
    (">=0", "1.0.0"), (">=0.0.0", "1.0.0"), (">=0.x", "1.0.0"), (">= 0.0", "1.0.0"),
    ("||", "1.0.0"), ("1 ||", "1.0.0"), ("|| 2", "1.0.0"), ("~2 || x.x.x", "1.0.0"),
    ("2 || >=0", "1.0.0"), ("x x", "1.0.0"), ("* >=0.0.0", "1.0.0"),
    # a wildcard AND-ed with a range is that range (node-semver drops the "*")
    ("2 x", "2.0.0"), ("x.x.x 2", "2.0.0"), (">=0 <2", "1.0.0"), (">=0 2", "2.0.0"),
    # not "any": the newest version admitted, as before
    (">=0.1", "2.0.0"), (">=1", "2.0.0"), ("~2 || 1", "2.0.0"),
])
def test_every_range_node_semver_reads_as_any_version_is_served_version_1(header, served):
    assert negotiate(header) == served


@pytest.mark.parametrize("header", [">*", "<x", "<x.x.x", ">X.1"])
def test_greater_or_less_than_any_version_admits_none(header):
    # node-semver: ">*" and "<*" are "<0.0.0-0", which nothing satisfies
    with pytest.raises(InvalidVersionError):
        negotiate(header)
