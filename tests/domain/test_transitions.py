"""The state machine table, walked whole: every (state, event) pair, refused ones included."""

from __future__ import annotations

import itertools

import pytest

from domain.errors import IllegalTransitionError
from domain.states import VmState
from domain.transitions import PREVIOUS, STATE_EVENTS, TRANSITIONS, after

ALL_PAIRS = list(itertools.product(VmState, STATE_EVENTS))


def _id(pair: tuple[VmState, str]) -> str:
    return f"{pair[0].value}-{pair[1]}"


def test_the_table_names_only_known_states_and_state_events():
    for (state, event_name), target in TRANSITIONS.items():
        assert state in VmState
        assert event_name in STATE_EVENTS
        assert target == PREVIOUS or target in VmState


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_id)
def test_each_state_and_event_gives_the_listed_state_or_is_refused(pair):
    state, event_name = pair
    if pair not in TRANSITIONS:
        with pytest.raises(IllegalTransitionError) as refused:
            after(state, event_name, previous=VmState.RUNNING, has_server=True)
        assert refused.value.state == state.value
        assert refused.value.event_name == event_name
        return
    listed = TRANSITIONS[pair]
    expected = VmState.STOPPED if listed == PREVIOUS else listed
    assert after(state, event_name, previous=VmState.STOPPED, has_server=True) is expected


def test_every_event_that_changes_state_is_possible_somewhere():
    assert {event_name for _, event_name in TRANSITIONS} == set(STATE_EVENTS)


@pytest.mark.parametrize(
    "previous", [s for s in VmState if (s, "Quarantined") in TRANSITIONS], ids=str
)
def test_released_restores_the_state_the_vm_had_before_quarantine(previous):
    quarantined = after(previous, "Quarantined", has_server=True)
    assert quarantined is VmState.QUARANTINED
    assert after(quarantined, "Released", previous=previous, has_server=True) is previous


def test_released_without_a_previous_state_is_refused():
    with pytest.raises(IllegalTransitionError):
        after(VmState.QUARANTINED, "Released", has_server=True)


def test_a_state_given_as_plain_text_is_read_like_the_enum():
    # Snapshots store states as plain strings; the table must answer them the same.
    assert after("stopped", "Started", has_server=True) is VmState.RUNNING  # type: ignore[arg-type]


@pytest.mark.parametrize("has_server", [True, False])
def test_a_refused_transition_says_whether_the_vm_is_on_a_server(has_server):
    with pytest.raises(IllegalTransitionError) as refused:
        after(VmState.STOPPED, "Rebooted", has_server=has_server)
    assert refused.value.has_server is has_server
