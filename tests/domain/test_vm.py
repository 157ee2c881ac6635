"""The Vm aggregate, given events -> when a command -> then events (or a refusal).

``vm_in(state)`` gives a VM whose history led to ``state`` with nothing pending, so
``recorded(vm)`` returns exactly what the command under test recorded.
"""

from __future__ import annotations

import itertools

import pytest
from eventsourcing.application import Application

from domain.errors import (
    DomainError,
    IllegalTransitionError,
    InvalidTransitionError,
)
from domain.rules import Verdict, allowed_actions, verdict
from domain.states import JOB_FOR_ACTION, Action, DesiredState, VmState
from domain.vm import Vm
from tests.builders import (
    LEASE,
    OWNER,
    T0,
    cause,
    new_job_uuid,
    new_vm,
    queue,
    recorded,
    run_head_job,
    vm_in,
)
from tests.domain.test_rules import EXPECTED


def claim(vm: Vm, worker: str = "w1", now=T0) -> str:
    """Start the head job as ``worker`` at ``now`` with the standard lease."""
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker=worker, now=now, lease_expires_at=now + LEASE, cause=cause())
    return job_uuid


# -- creation ------------------------------------------------------------------------------


def test_create_records_the_vm_and_queues_its_provision_job():
    vm = new_vm(alias="web-1", tags={"role": "web"})
    assert recorded(vm) == ["Created", "JobQueued"]
    assert vm.state is VmState.PROVISIONING
    assert vm.desired_state is DesiredState.RUNNING
    assert vm.owner_uuid == OWNER and vm.alias == "web-1" and vm.tags == {"role": "web"}
    assert vm.server_uuid is None
    assert [(j["name"], j["execution"]) for j in vm.active_jobs] == [("provision", "queued")]
    assert vm.version == 2


# -- repeats -----------------------------------------------------------------------------


def asked(if_already: str, **recorded) -> dict:
    """The params a repeat of a job queued by ``queue`` (no args) would record."""
    return {"args": {}, "if_already": if_already, **recorded}


def test_a_repeat_merges_only_into_the_last_job_of_the_queue():
    """The last acknowledged intent wins (api.md): stop, start, stop is three jobs; a stop
    repeated right after a stop is one."""
    vm = vm_in(VmState.RUNNING)
    first_stop = queue(vm, Action.STOP)
    assert vm.matching_active_job("stop", asked("fail"))["uuid"] == first_stop
    queue(vm, Action.START)
    assert vm.matching_active_job("stop", asked("fail")) is None
    assert vm.matching_active_job("start", asked("fail"))["uuid"] == vm.active_jobs[-1]["uuid"]


def test_a_repeat_merges_only_into_a_job_that_does_what_its_own_would():
    """A v1 stop fails on a stopped VM; a v2 or idempotent one succeeds doing nothing: the
    one cannot answer the other."""
    vm = vm_in(VmState.RUNNING)
    stop = queue(vm, Action.STOP)
    assert vm.matching_active_job("stop", asked("succeed")) is None
    assert vm.matching_active_job("stop", asked("fail"))["uuid"] == stop


def test_a_repeat_merges_only_into_a_job_recording_the_very_same_params():
    """Found by a tester: a stop with another ``x-context`` merged into the last stop, so the
    job kept the first caller's context and the second request was recorded nowhere. Every
    param a job records (its context, its API version) must be the repeat's own."""
    vm = vm_in(VmState.RUNNING)
    job_uuid = new_job_uuid()
    recorded_params = asked("succeed", api_version=2, context={"who": "A"})
    vm.queue_job(action=Action.STOP, job_uuid=job_uuid, name="stop", params=recorded_params,
                 cause=cause())
    assert vm.matching_active_job("stop", dict(recorded_params))["uuid"] == job_uuid
    for other in (asked("succeed", api_version=2, context={"who": "B"}),
                  asked("succeed", api_version=2),
                  asked("succeed", api_version=1, context={"who": "A"}),
                  {**recorded_params, "args": {"force": True}}):
        assert vm.matching_active_job("stop", other) is None, other


def test_a_repeat_merges_into_a_running_job_only_with_nothing_queued_after_it():
    vm = vm_in(VmState.RUNNING)
    stop = queue(vm, Action.STOP)
    claim(vm)
    assert vm.matching_active_job("stop", asked("fail"))["uuid"] == stop
    queue(vm, Action.REBOOT)
    assert vm.matching_active_job("stop", asked("fail")) is None


# -- queue_job follows the rules table --------------------------------------------------------

JOB_PAIRS = list(itertools.product(VmState, JOB_FOR_ACTION))


@pytest.mark.parametrize("pair", JOB_PAIRS, ids=lambda p: f"{p[0].value}-{p[1].value}")
def test_queue_job_records_a_job_unless_the_rules_refuse_the_action(pair):
    state, action = pair
    vm = vm_in(state)  # a failed one's provision failed before placing it: on no server
    has_server = vm.server_uuid is not None
    if verdict(state, action, has_server=has_server) in (Verdict.REFUSED, Verdict.UNALLOCATED):
        with pytest.raises(InvalidTransitionError) as refused:
            queue(vm, action)
        assert refused.value.state == state.value
        assert refused.value.allowed_actions == allowed_actions(state, has_server=has_server)
        assert recorded(vm) == []
    else:
        job_uuid = queue(vm, action)
        assert recorded(vm) == ["JobQueued"]
        assert vm.active_jobs[-1]["uuid"] == job_uuid


def test_desired_state_follows_the_last_job_asked():
    vm = vm_in(VmState.RUNNING)
    assert vm.desired_state is DesiredState.RUNNING
    queue(vm, Action.STOP)
    assert vm.desired_state is DesiredState.STOPPED
    queue(vm, Action.UPDATE, alias="x")
    assert vm.desired_state is DesiredState.STOPPED  # an update asks for no state
    queue(vm, Action.START)
    assert vm.desired_state is DesiredState.RUNNING
    queue(vm, Action.DESTROY)
    assert vm.desired_state is DesiredState.DESTROYED


def test_a_failed_vm_that_should_run_is_told_apart_from_one_stopped_on_purpose():
    vm = vm_in(VmState.RUNNING)
    vm.record_failed("crashed", "guest panic", cause=cause())
    assert (vm.state, vm.desired_state) == (VmState.FAILED, DesiredState.RUNNING)
    assert vm.error == {"reason": "crashed", "message": "guest panic"}


# -- metadata --------------------------------------------------------------------------------


def test_update_metadata_records_only_what_changes():
    vm = vm_in(VmState.RUNNING, alias="a", tags={"k": "v"})
    assert vm.update_metadata({"alias": "b", "tags": {"k": "v"}}, cause=cause()) is True
    events = vm.collect_events()
    assert [type(e).__name__ for e in events] == ["MetadataUpdated"]
    assert events[0].changes == {"alias": "b"}
    assert vm.alias == "b"


def test_update_metadata_records_nothing_when_nothing_changes():
    vm = vm_in(VmState.STOPPED, alias="a", customer_metadata={"x": "1"})
    unchanged = {"alias": "a", "customer_metadata": {"x": "1"}}
    assert vm.update_metadata(unchanged, cause=cause()) is False
    assert recorded(vm) == []


def test_update_metadata_of_a_field_that_is_not_updatable_is_a_domain_refusal():
    vm = vm_in(VmState.RUNNING)
    with pytest.raises(DomainError) as refused:
        vm.update_metadata({"ram": 4096}, cause=cause())
    assert refused.value.errors[0]["field"] == "ram"
    assert recorded(vm) == []


def test_update_metadata_of_a_destroyed_vm_is_refused():
    vm = vm_in(VmState.DESTROYED)
    with pytest.raises(IllegalTransitionError):
        vm.update_metadata({"alias": "x"}, cause=cause())



@pytest.mark.parametrize("state", list(VmState))
def test_a_metadata_update_is_refused_in_the_states_the_contract_refuses_an_update(state):
    vm = vm_in(state, alias="a")
    if EXPECTED[state][Action.UPDATE] is Verdict.REFUSED:
        with pytest.raises(IllegalTransitionError):
            vm.update_metadata({"alias": "renamed"}, cause=cause())
        assert recorded(vm) == []
    else:
        assert vm.update_metadata({"alias": "renamed"}, cause=cause()) is True
        assert recorded(vm) == ["MetadataUpdated"]


# -- replay ----------------------------------------------------------------------------------


def _long_history() -> Vm:
    vm = new_vm(alias="a", customer_metadata={"m": 1}, tags={"t": "x"})
    run_head_job(vm, lambda v: v.record_provisioned("srv-1", cause=cause()))
    queue(vm, Action.STOP)
    run_head_job(vm, lambda v: v.record_stopped(cause=cause()))
    queue(vm, Action.UPDATE, alias="b")
    job = claim(vm)
    vm.record_step(job, {"name": "update_metadata", "error": None}, cause=cause(), worker="w1")
    vm.update_metadata({"alias": "b", "tags": {"t": "y"}}, cause=cause())
    vm.succeed_job(job, cause=cause(), worker="w1")
    queue(vm, Action.START)
    later = T0 + LEASE * 3
    job = claim(vm, "w1")
    vm.start_job(job, worker="w2", now=later, lease_expires_at=later + LEASE, cause=cause())
    vm.record_started(cause=cause(), server_uuid="srv-2")
    vm.succeed_job(job, cause=cause(), worker="w2")
    vm.record_failed("crashed", "panic", cause=cause())
    vm.record_quarantined("why", cause=cause())
    vm.record_released(cause=cause())
    queue(vm, Action.START)
    queue(vm, Action.STOP)
    vm.cancel_job(vm.active_jobs[1]["uuid"], "no", cause=cause())
    return vm


def test_the_stored_events_replayed_rebuild_an_equal_aggregate():
    vm = _long_history()
    app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    app.save(vm)
    replayed = app.repository.get(vm.id)
    assert replayed.version == vm.version
    assert vars(replayed) == vars(vm)


def test_replay_up_to_a_version_gives_the_vm_as_it_was():
    vm = _long_history()
    app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    app.save(vm)
    assert app.repository.get(vm.id, version=2).state == VmState.PROVISIONING
    assert app.repository.get(vm.id, version=2).active_jobs[0]["name"] == "provision"
