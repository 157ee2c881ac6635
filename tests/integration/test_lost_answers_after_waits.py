"""The lost-answer rows' harder cases (docs/jobs.md, "An answer lost on the last attempt"):
what a wait, a lost worker, a removed or unknown server, or a node that answered before it
acted does to a step whose answer was lost, and each row for a start and a reboot as for a
stop (the rows' plain cases: test_lost_answers.py). No sleeps, both backends."""

from __future__ import annotations

import pytest

from domain.states import Action
from service.jobs.compute.driver import ComputeError, OutcomeUnknownError, UnknownServerError
from service.jobs.compute.simulated import simulated_server_uuid
from tests.builders import act, create, event_names, job, settle
from tests.integration.test_job_faults import WorkerDied, dies_once, rescuer
from tests.integration.test_lost_answers import (
    DESTROYED_ON_SHUTDOWN, S, lost_every_time, steps, waiting_stop,
)
from tests.integration.test_reconfigure_faults import (
    change, claims, running_vm_with_a_network,
)
from tests.integration.test_stale_reports import apply, pinned, taken


def test_a_stop_that_waited_then_lost_its_worker_still_asks_the_node_before_it_fails(
        services, monkeypatch):
    """Row L4 across a lost worker: the attempt after the wait dies, and the takeover's
    ``ensure_state`` is refused every attempt (the node did nothing more). The node stopped
    the VM on the first attempt, so the job must still ask it and adopt the stop; it used to
    fail the stop as plain, the log left running, and the next report destroyed the VM as a
    guest shutdown (``guest_shutdown: destroy``)."""
    vm_uuid, stop = waiting_stop(services, DESTROYED_ON_SHUTDOWN)
    waiting = job(services, stop)
    assert waiting["execution"] == "running", waiting
    assert waiting["chain_results"][-1]["result"] == {"waiting_for": [S]}
    assert services.fleet.copies(vm_uuid)[0]["state"] == "stopped"  # the lost stop did it
    # attempt 2 (after the wait): its worker dies in its first compute call
    dies_once(monkeypatch, services.fleet, "ensure_state")
    with pytest.raises(WorkerDied):
        rescuer(services, "second", leases_later=2).run_vm(vm_uuid)
    # attempt 3 (a takeover): the node refuses every ensure_state, and answers observe
    services.fleet.faults.inject("ensure_state", "fail", services.worker.step_attempts)
    assert rescuer(services, "third", leases_later=4).run_vm(vm_uuid)

    done = job(services, stop)
    assert done["execution"] == "succeeded", done
    assert steps(done)[-1] == ("reconcile", True)
    assert done["chain_results"][-1]["result"]["state"] == "stopped"
    assert services.commands.load(vm_uuid).state == "stopped"
    assert apply(services, taken(services)) == {}
    assert services.commands.load(vm_uuid).state == "stopped"
    assert "Destroyed" not in event_names(services, vm_uuid)
    assert services.commands.load(vm_uuid).active_jobs == []


def test_a_reboot_whose_answers_were_lost_after_a_guest_shutdown_records_the_shutdown(
        services):
    """Row L3 for a reboot the node did not do because the guest had shut the VM down: the
    job fails, and records what the observed run says (a guest shutdown), as the answered
    reboot does (``handlers.reboot``). It used to record only the run's sequence number, so
    the log stayed running and every later report was no later than it, for good."""
    vm_uuid = pinned(services)
    settle(services)
    services.fleet.shut_down_guest(vm_uuid)
    sent = taken(services)  # the agent's report of the shutdown, not applied yet
    lost_every_time(services, "ensure_state")
    reboot = act(services, vm_uuid, Action.REBOOT).job_uuid
    settle(services)

    failed = job(services, reboot)
    assert failed["execution"] == "failed", failed
    assert "not rebooted: the VM is stopped" in failed["error"], failed["error"]
    assert services.fleet.copies(vm_uuid)[0]["state"] == "stopped"
    assert services.commands.load(vm_uuid).state == "stopped"
    assert "Rebooted" not in event_names(services, vm_uuid)
    assert apply(services, sent) == {}  # older than the log's reconcile
    assert apply(services, taken(services)) == {}
    assert services.commands.load(vm_uuid).state == "stopped"


@pytest.mark.parametrize("status", ["removed", "unknown"])
def test_a_stop_waiting_for_a_server_removed_or_unknown_ends_failed(
        services, monkeypatch, status):
    """A removed server is trusted gone and an unknown one takes no call (as a provision's
    look treats them: ``takeovers._where_is``): asking again cannot help, so the stop that
    waited for the node ends failed at the next claim, as any stop there would, rather than
    waiting every lease until the stuck check quarantined the VM."""
    vm_uuid, stop = waiting_stop(services)
    if status == "removed":
        services.fleet.set_server_status(S, "removed")
    else:  # the driver no longer has the server: it takes no call
        def unknown(*args, **kwargs):
            raise UnknownServerError(f"unknown server {S}")

        for operation in ("ensure_state", "observe", "raise_fence", "inventory"):
            monkeypatch.setattr(services.fleet, operation, unknown)
    assert rescuer(services).run_vm(vm_uuid)

    failed = job(services, stop)
    assert failed["execution"] == "failed", failed
    assert failed["chain_results"][-1]["result"] != {"waiting_for": [S]}
    assert services.commands.load(vm_uuid).active_jobs == []


def test_a_provision_whose_copy_may_be_on_a_server_the_driver_then_lost_does_not_move_on(
        services, monkeypatch):
    """Row L8 in a placement: ``ensure_registered`` made the copy on the first candidate and
    its answers were lost, then the driver no longer knows that server. A placement moves on
    from a server the driver does not know (``placing.place_and_register``), but this one may
    hold the copy, so the provision is reconciled as its takeover with no attempts left
    rather than placed on the next candidate: the copy it finds is removed, and the job
    fails. It used to provision the VM on the next server, the copy left on the first."""
    first, second = simulated_server_uuid(1), simulated_server_uuid(2)
    services.worker.placement = lambda vm: [first, second]
    original = services.fleet.ensure_registered
    calls: list[int] = []

    def lost_then_unknown(server_uuid, *args, **kwargs):
        calls.append(1)
        if len(calls) == services.worker.step_attempts:
            raise UnknownServerError(f"unknown server {server_uuid}")
        original(server_uuid, *args, **kwargs)
        raise OutcomeUnknownError("ensure_registered timed out")

    monkeypatch.setattr(services.fleet, "ensure_registered", lost_then_unknown)
    accepted = create(services)
    settle(services)

    failed = job(services, accepted.job_uuid)
    assert failed["execution"] == "failed", failed
    assert "place" not in [name for name, _ in steps(failed)[1:]]  # no second placement
    assert services.fleet.copies(accepted.vm_uuid) == []
    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "failed"
    assert accepted.vm_uuid not in services.commands.load_server(second).claims


# -- the rows' other cases --------------------------------------------------------------------


def scripted(monkeypatch, services, operation: str, outcomes: list[str]) -> None:
    """The next calls of the fleet's ``operation``, one outcome each: ``lost`` (the node
    does the work, the answer is lost), ``lost before`` (the answer lost before the node
    took the call: nothing done), ``fail`` (refused, nothing done); later calls work."""
    original = getattr(services.fleet, operation)
    left = list(outcomes)

    def call(*args, **kwargs):
        outcome = left.pop(0) if left else "works"
        if outcome == "fail":
            raise ComputeError(f"injected failure of {operation}")
        if outcome == "lost before":
            raise OutcomeUnknownError(f"{operation} timed out")
        answer = original(*args, **kwargs)
        if outcome == "lost":
            raise OutcomeUnknownError(f"{operation} timed out (its response was lost)")
        return answer

    monkeypatch.setattr(services.fleet, operation, call)


def stopped_vm(services) -> str:
    vm_uuid = pinned(services)
    settle(services)
    act(services, vm_uuid, Action.STOP)
    settle(services)
    assert services.commands.load(vm_uuid).state == "stopped"
    return vm_uuid


@pytest.mark.parametrize("action", [Action.START, Action.REBOOT])
def test_a_start_or_reboot_whose_answer_was_lost_before_the_node_took_it_fails_as_it_says(
        services, monkeypatch, action):
    """Row L3 for a start and a reboot: the node has no run this job began, so the job
    fails as before, its ``reconcile`` step recording the node's answer; nothing booted."""
    vm_uuid = stopped_vm(services) if action is Action.START else pinned(services)
    settle(services)
    state, boots = services.commands.load(vm_uuid).state, services.fleet.boots(vm_uuid)
    scripted(monkeypatch, services, "ensure_state", ["lost before"] * 3)
    done = act(services, vm_uuid, action).job_uuid
    settle(services)

    failed = job(services, done)
    assert failed["execution"] == "failed", failed
    assert steps(failed)[-2:] == [("reconcile", True), (action.value, False)]
    assert failed["chain_results"][-2]["result"]["begun_by_this_job"] is False
    assert services.commands.load(vm_uuid).state == state
    assert services.fleet.boots(vm_uuid) == boots
    assert apply(services, taken(services)) == {}


@pytest.mark.parametrize("action", [Action.START, Action.REBOOT])
def test_a_start_or_reboot_whose_answer_was_lost_and_whose_node_cannot_be_asked_waits(
        services, action):
    """Row L4 for a start and a reboot: the job waits, and the next claim adopts the run
    the lost attempt began, booting nothing more."""
    vm_uuid = stopped_vm(services) if action is Action.START else pinned(services)
    settle(services)
    boots = services.fleet.boots(vm_uuid)
    lost_every_time(services, "ensure_state")
    services.fleet.faults.inject("inventory", "fail", 2 if action is Action.START else 1)
    done = act(services, vm_uuid, action).job_uuid
    settle(services)
    waiting = job(services, done)
    assert waiting["execution"] == "running", waiting
    assert waiting["chain_results"][-1]["result"] == {"waiting_for": [S]}

    assert rescuer(services).run_vm(vm_uuid)
    assert job(services, done)["execution"] == "succeeded"
    assert services.commands.load(vm_uuid).state == "running"
    assert services.fleet.boots(vm_uuid) == boots + 1
    assert apply(services, taken(services)) == {}


def test_a_stop_asked_again_after_a_wait_whose_step_is_refused_asks_the_node(services):
    """Row L4's next claim: its step refused every attempt (the node did nothing more) is
    still one whose outcome is unknown, so the node is asked, and the stop the first
    attempt did is adopted."""
    vm_uuid, stop = waiting_stop(services, DESTROYED_ON_SHUTDOWN)
    services.fleet.faults.inject("ensure_state", "fail", services.worker.step_attempts)
    assert rescuer(services).run_vm(vm_uuid)

    done = job(services, stop)
    assert done["execution"] == "succeeded", done
    assert steps(done)[-1] == ("reconcile", True)
    assert services.commands.load(vm_uuid).state == "stopped"
    assert apply(services, taken(services)) == {}


def test_an_update_whose_answer_was_lost_and_whose_set_back_fails_says_the_node_may_hold_it(
        services, monkeypatch):
    """Row L6 when the set-back fails too: the job fails saying the node may hold the
    change, and the log keeps its values."""
    vm_uuid = pinned(services)
    settle(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    scripted(monkeypatch, services, "reconfigure", ["lost"] * 3 + ["fail"] * 3)
    update = act(services, vm_uuid, Action.UPDATE, args={"alias": "web"}).job_uuid
    settle(services)

    failed = job(services, update)
    assert failed["execution"] == "failed", failed
    assert "setting the log's values back failed too" in failed["error"], failed["error"]
    assert "MetadataUpdated" not in event_names(services, vm_uuid)
    assert services.fleet.config(server_uuid, vm_uuid).get("alias") == "web"


@pytest.mark.parametrize("node", ["keeps its copy", "cannot be asked"])
def test_a_destroy_whose_answer_was_lost_fails_keeping_the_nics_unless_the_copy_is_gone(
        services, monkeypatch, node):
    """Row L7's other cases: a copy still there (the answers lost before the node took the
    call), or a server that cannot be asked: the destroy fails as before, the VM keeping
    its NICs and their addresses."""
    vm_uuid, _, network = running_vm_with_a_network(services)
    change(services, vm_uuid, add=[network])
    settle(services)
    [nic] = services.commands.load(vm_uuid).nic_list
    scripted(monkeypatch, services, "unregister",
             ["lost before" if node == "keeps its copy" else "lost"] * 3)
    if node == "cannot be asked":
        services.fleet.faults.inject("inventory", "fail", 1)
    destroy = act(services, vm_uuid, Action.DESTROY).job_uuid
    settle(services)

    failed = job(services, destroy)
    assert failed["execution"] == "failed", failed
    vm = services.commands.load(vm_uuid)
    assert vm.state == "running"
    assert vm.nic_list == [nic]
    assert claims(services, network) == {nic["ip"]: vm_uuid}
    reconciles = [step for step in failed["chain_results"] if step["name"] == "reconcile"]
    if node == "keeps its copy":
        assert reconciles[0]["result"]["state"] == "running"
        assert services.fleet.copies(vm_uuid) != []
    else:
        assert reconciles == []


def test_a_provision_whose_boot_answer_was_lost_and_whose_server_cannot_be_asked_waits(
        services, monkeypatch):
    """Row L8's wait (as P1w): the boot's answers lost, then its server cannot be asked nor
    fenced, so nothing is decided; once it answers, the boot is adopted, booted once."""
    original = services.fleet.ensure_state
    calls: list[int] = []

    def lost_then_unreachable(server_uuid, *args, **kwargs):
        original(server_uuid, *args, **kwargs)
        calls.append(1)
        if len(calls) == services.worker.step_attempts:
            services.fleet.set_server_status(server_uuid, "unknown")
        raise OutcomeUnknownError("ensure_state timed out (its response was lost)")

    monkeypatch.setattr(services.fleet, "ensure_state", lost_then_unreachable)
    accepted = create(services)
    settle(services)
    waiting = job(services, accepted.job_uuid)
    assert waiting["execution"] == "running", waiting
    server_uuid = services.commands.load(accepted.vm_uuid).claim["server_uuid"]
    assert waiting["chain_results"][-1]["result"] == {"waiting_for": [server_uuid]}

    monkeypatch.setattr(services.fleet, "ensure_state", original)
    services.fleet.set_server_status(server_uuid, "running")
    assert rescuer(services).run_vm(accepted.vm_uuid)
    assert job(services, accepted.job_uuid)["execution"] == "succeeded"
    assert services.commands.load(accepted.vm_uuid).state == "running"
    assert services.fleet.boots(accepted.vm_uuid) == 1
