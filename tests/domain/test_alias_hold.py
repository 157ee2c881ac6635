"""Per-owner alias uniqueness in the domain (domain/alias_hold.py): what a VM holds in each
state, what a client's request asks for, and the hold's reserve, adopt and release."""

from __future__ import annotations

import uuid

import pytest

from domain.alias_hold import (
    AliasHold, DuplicateAliasError, asked_aliases, held_aliases, hold_id,
)
from domain.states import Action, VmState
from domain.vm import Vm
from tests.builders import OWNER, cause, queue, recorded, run_head_job, vm_in

OTHER = "6c8a8f2e-1a8d-4b9e-9a51-1b6b6e3a0c11"


@pytest.mark.parametrize("state", [VmState.PROVISIONING, VmState.RUNNING, VmState.STOPPED])
def test_an_active_vm_holds_its_alias(state) -> None:
    assert held_aliases(vm_in(state, alias="web-1")) == {(OWNER, "web-1")}


@pytest.mark.parametrize("state", [VmState.DESTROYED, VmState.FAILED])
def test_a_destroyed_or_failed_vm_holds_nothing(state) -> None:
    assert held_aliases(vm_in(state, alias="web-1")) == frozenset()


def test_a_vm_without_an_alias_holds_nothing() -> None:
    assert held_aliases(vm_in(VmState.RUNNING)) == frozenset()


def test_a_quarantined_vm_holds_its_alias_for_its_owner_by_the_state_it_had() -> None:
    vm = vm_in(VmState.QUARANTINED, alias="web-1")
    assert vm.owner_uuid != OWNER  # the quarantine's
    assert held_aliases(vm) == {(OWNER, "web-1")}
    failed = vm_in(VmState.FAILED, alias="web-1")
    failed.record_quarantined("by hand", cause=cause())
    assert held_aliases(failed) == frozenset()


def test_an_update_job_holds_the_alias_it_sets_until_it_ends() -> None:
    vm = vm_in(VmState.RUNNING, alias="web-1")
    job = queue(vm, Action.UPDATE, alias="web-2")
    assert held_aliases(vm) == {(OWNER, "web-1"), (OWNER, "web-2")}
    run_head_job(vm, lambda v: v.update_metadata({"alias": "web-2"}, cause=cause()))
    assert vm.active_job(job) is None
    assert held_aliases(vm) == {(OWNER, "web-2")}


def test_an_update_clearing_the_alias_holds_nothing_new() -> None:
    vm = vm_in(VmState.RUNNING, alias="web-1")
    queue(vm, Action.UPDATE, alias=None, tags={"a": 1})
    assert held_aliases(vm) == {(OWNER, "web-1")}


def test_a_failed_vm_holds_the_alias_its_update_job_sets() -> None:
    vm = vm_in(VmState.FAILED, alias="web-1")
    queue(vm, Action.UPDATE, alias="web-2")
    assert held_aliases(vm) == {(OWNER, "web-2")}


def test_a_create_and_an_update_ask_for_their_aliases_a_discovery_for_none() -> None:
    created = Vm.create(vm_uuid=uuid.uuid4(), owner_uuid=OWNER, brand="joyent", ram=64,
                        provision_job_uuid=str(uuid.uuid4()), cause=cause(), alias="web-1")
    assert asked_aliases(created) == {(OWNER, "web-1")}
    running = vm_in(VmState.RUNNING, alias="web-1")
    queue(running, Action.UPDATE, alias="web-2")
    assert asked_aliases(running) == {(OWNER, "web-2")}
    found = Vm.discover(vm_uuid=uuid.uuid4(), state="running", server_uuid=None,
                        owner_uuid=OWNER, brand="joyent", ram=64, cause=cause(),
                        reported_at=None, alias="web-3")
    assert held_aliases(found) == {(OWNER, "web-3")}
    assert asked_aliases(found) == frozenset()


def test_hold_ids_are_per_owner_and_alias_and_stable() -> None:
    assert hold_id(OWNER, "web-1") == hold_id(OWNER, "web-1")
    assert len({hold_id(OWNER, "web-1"), hold_id(OTHER, "web-1"), hold_id(OWNER, "web-2"),
                hold_id(OWNER, "web-1 "), hold_id(OWNER + "x", "web-1")}) == 5


def test_a_reservation_of_a_held_alias_is_refused_with_vmapis_words() -> None:
    hold = AliasHold.create(OWNER, "web-1", cause=cause())
    hold.reserve("vm-a", cause=cause())
    assert recorded(hold) == ["Opened", "AliasReserved"]
    with pytest.raises(DuplicateAliasError) as refused:
        hold.reserve("vm-b", cause=cause())
    assert refused.value.errors == [{"field": "alias", "code": "Duplicate",
                                     "message": "Already exists for this owner_uuid"}]
    assert recorded(hold) == []
    hold.reserve("vm-a", cause=cause())  # its own: nothing to record
    assert recorded(hold) == []


def test_a_released_alias_may_be_reserved_again() -> None:
    hold = AliasHold.create(OWNER, "web-1", cause=cause())
    hold.reserve("vm-a", cause=cause())
    assert hold.release("vm-a", cause=cause())
    assert not hold.release("vm-a", cause=cause())  # not held: nothing
    hold.reserve("vm-b", cause=cause())
    assert hold.holders == ["vm-b"]
    assert recorded(hold) == ["Opened", "AliasReserved", "AliasReleased", "AliasReserved"]


def test_an_adoption_is_never_refused_and_blocks_reservations_until_released() -> None:
    hold = AliasHold.create(OWNER, "web-1", cause=cause())
    hold.reserve("vm-a", cause=cause())
    hold.adopt("vm-b", cause=cause())
    hold.adopt("vm-b", cause=cause())  # once
    assert hold.holders == ["vm-a", "vm-b"]
    hold.release("vm-a", cause=cause())
    with pytest.raises(DuplicateAliasError):
        hold.reserve("vm-c", cause=cause())
    hold.release("vm-b", cause=cause())
    hold.reserve("vm-c", cause=cause())
    assert hold.holders == ["vm-c"]
