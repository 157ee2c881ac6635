"""The command rules table, walked whole against an expected table written here
independently from api.md ("DeleteVm and actions") and design.md."""

from __future__ import annotations

import itertools

import pytest

from domain import rules
from domain.errors import InvalidTransitionError
from domain.rules import RULES, Verdict, allowed_actions, verdict
from domain.states import Action, VmState
from domain.transitions import TRANSITIONS

ok, queued, already, no = Verdict.ALLOWED, Verdict.QUEUED, Verdict.ALREADY, Verdict.REFUSED

# Written from the contract, not copied from domain/rules.py:
# - provisioning: every job waits behind the provision (v1 answers UnallocatedVM); only the
#   operator quarantine may take it at once; release is for quarantined VMs only.
# - the target already holds: start on running, stop/kill on stopped, quarantine on
#   quarantined, destroy on destroyed.
# - reboot needs a running VM; a destroyed VM can only be "destroyed again"; a quarantined VM
#   can be destroyed or released and nothing else.
EXPECTED: dict[VmState, dict[Action, Verdict]] = {
    VmState.PROVISIONING: {
        Action.START: queued, Action.STOP: queued, Action.KILL: queued, Action.REBOOT: queued,
        Action.UPDATE: queued, Action.DESTROY: queued, Action.QUARANTINE: ok, Action.RELEASE: no,
    },
    VmState.RUNNING: {
        Action.START: already, Action.STOP: ok, Action.KILL: ok, Action.REBOOT: ok,
        Action.UPDATE: ok, Action.DESTROY: ok, Action.QUARANTINE: ok, Action.RELEASE: no,
    },
    VmState.STOPPED: {
        Action.START: ok, Action.STOP: already, Action.KILL: already, Action.REBOOT: no,
        Action.UPDATE: ok, Action.DESTROY: ok, Action.QUARANTINE: ok, Action.RELEASE: no,
    },
    VmState.FAILED: {
        Action.START: ok, Action.STOP: ok, Action.KILL: ok, Action.REBOOT: no,
        Action.UPDATE: ok, Action.DESTROY: ok, Action.QUARANTINE: ok, Action.RELEASE: no,
    },
    VmState.DESTROYED: {
        Action.START: no, Action.STOP: no, Action.KILL: no, Action.REBOOT: no,
        Action.UPDATE: no, Action.DESTROY: already, Action.QUARANTINE: no, Action.RELEASE: no,
    },
    VmState.QUARANTINED: {
        Action.START: no, Action.STOP: no, Action.KILL: no, Action.REBOOT: no,
        Action.UPDATE: no, Action.DESTROY: ok, Action.QUARANTINE: already, Action.RELEASE: ok,
    },
}

ALL_PAIRS = list(itertools.product(VmState, Action))

# The state event a job for the action ends with (update changes no state).
EVENT_OF_ACTION = {
    Action.START: "Started", Action.STOP: "Stopped", Action.KILL: "Stopped",
    Action.REBOOT: "Rebooted", Action.DESTROY: "Destroyed", Action.QUARANTINE: "Quarantined",
    Action.RELEASE: "Released",
}


def test_the_table_has_a_verdict_for_every_state_and_action_and_nothing_else():
    assert set(RULES) == set(ALL_PAIRS)


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=lambda p: f"{p[0].value}-{p[1].value}")
def test_each_state_and_action_gets_the_expected_verdict(pair):
    state, action = pair
    assert verdict(state, action, has_server=True) is EXPECTED[state][action]


@pytest.mark.parametrize("state", list(VmState), ids=str)
def test_allowed_actions_lists_every_action_not_refused_in_table_order(state):
    expected = [a.value for a in Action if EXPECTED[state][a] is not no]
    if EXPECTED[state][Action.UPDATE] is not no:  # a NIC change is an update (docs/api.md)
        after_update = expected.index("update") + 1
        expected[after_update:after_update] = ["add_nics", "remove_nics"]
    assert allowed_actions(state, has_server=True) == expected


@pytest.mark.parametrize("state", list(VmState), ids=str)
def test_a_vm_on_no_server_may_change_its_nics_only_behind_its_provision(state):
    # operator tester: refusals left add_nics and remove_nics out where they were taken
    listed = {"add_nics", "remove_nics"} <= set(allowed_actions(state, has_server=False))
    assert listed == (state is VmState.PROVISIONING)


IMMEDIATE_STATE_CHANGES = [
    (state, action) for state, action in ALL_PAIRS
    if EXPECTED[state][action] is ok and action in EVENT_OF_ACTION
]


@pytest.mark.parametrize(
    "pair", IMMEDIATE_STATE_CHANGES, ids=lambda p: f"{p[0].value}-{p[1].value}"
)
def test_an_action_allowed_at_once_leads_to_a_transition_the_state_machine_permits(pair):
    state, action = pair
    assert rules.verdict(state, action, has_server=True) is ok
    assert (state, EVENT_OF_ACTION[action]) in TRANSITIONS


@pytest.mark.parametrize("pair", sorted(RULES), ids=lambda p: f"{p[0]}-{p[1]}")
def test_require_returns_the_verdict_or_raises_the_refusal_naming_the_allowed_actions(pair):
    state, action = pair
    if RULES[pair] is Verdict.REFUSED:
        with pytest.raises(InvalidTransitionError) as refused:
            rules.require(state, action, has_server=True)
        assert refused.value.state == state and refused.value.action == action
        assert refused.value.allowed_actions == allowed_actions(state, has_server=True)
    else:
        assert rules.require(state, action, has_server=True) is RULES[pair]


@pytest.mark.parametrize("pair", sorted(RULES), ids=lambda p: f"{p[0]}-{p[1]}")
def test_on_no_server_an_action_carried_out_on_the_server_is_unallocated_and_not_allowed(pair):
    """A VM whose provision failed before placing it has no node to start, stop or kill on:
    the table says so itself (the job's handler asks the same verdict), and its error
    bodies do not list what would be refused."""
    state, action = pair
    found = verdict(state, action, has_server=False)
    if RULES[pair] is ok and action in rules.ON_ITS_SERVER:
        assert found is Verdict.UNALLOCATED
        with pytest.raises(InvalidTransitionError) as refused:
            rules.require(state, action, has_server=False)
        assert "with no server_uuid" in str(refused.value)
        assert action.value not in allowed_actions(state, has_server=False)
    else:
        assert found is RULES[pair]


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=lambda p: f"{p[0].value}-{p[1].value}")
def test_refused_is_the_contracts_refusal(pair):
    state, action = pair
    assert rules.refused(state, action) is (EXPECTED[state][action] is no)


# A job queued behind a destroy gets the ticket once the destroy has run: on a destroyed VM.
# Written from the contract (api.md, "Contract: DeleteVm and actions"): every action that
# queues a job but the destroy itself, and the NIC changes (jobs of an update), can then only
# fail; a destroy finds its target holding; the quarantine and the release queue no job (they
# act at once, ahead of the destroy).
FAILS_BEHIND_A_DESTROY = {
    "start": True, "stop": True, "kill": True, "reboot": True, "update": True,
    "add_nics": True, "remove_nics": True,
    "destroy": False, "quarantine": False, "release": False,
}


@pytest.mark.parametrize("name", sorted(FAILS_BEHIND_A_DESTROY))
def test_the_actions_that_can_only_fail_behind_a_destroy(name):
    assert rules.fails_behind_destroy(name) is FAILS_BEHIND_A_DESTROY[name]


@pytest.mark.parametrize("action", list(Action), ids=str)
def test_an_action_fails_behind_a_destroy_where_its_job_would_be_refused_on_a_destroyed_vm(
        action):
    """The rule is the table's: what a job for the action meets at its ticket once the
    destroy ahead of it has run (the handlers ask ``verdict`` there)."""
    queues_a_job = action not in (Action.QUARANTINE, Action.RELEASE)
    refused_then = verdict(VmState.DESTROYED, action, has_server=False) is no
    assert rules.fails_behind_destroy(action) is (queues_a_job and refused_then)
