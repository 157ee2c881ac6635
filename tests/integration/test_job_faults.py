"""Jobs that survive failure, on both backends: a worker that dies after claiming a job, a
compute call whose response is lost, a guest that shuts down between a step and its replay,
and a delete arriving in every phase of a provision (design.md: the ticket, the lease and the
takeover that first asks the compute nodes what is really there).

A worker's death is simulated by an exception no handler catches (``WorkerDied``), raised once
from a compute operation or from the job's last save; its lease then expires for a rescuer
whose clock is a fixed instant after it (no sleeps).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from domain.errors import UnallocatedVmError
from domain.states import Action
from domain.vm import Vm
from service.jobs.run import JobRun
from service.jobs.worker import Worker, utcnow
from tests.builders import act, create, job, stream


class WorkerDied(Exception):
    """The worker process died here (nothing in the service catches this)."""


# -- builders --------------------------------------------------------------------------------


def dies_once(monkeypatch, target: Any, name: str, *, after_the_work: bool = False) -> None:
    """Make the next call of ``target.name`` kill the worker, before doing its work or after;
    later calls (the rescuer's) work again."""
    original = getattr(target, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(target, name, original)
        if after_the_work:
            original(*args, **kwargs)
        raise WorkerDied(f"the worker died in {name}")

    monkeypatch.setattr(target, name, dying)


def first_calls(monkeypatch, target: Any, name: str, hook: Callable[[], None]) -> None:
    """Run ``hook`` once, just before the next call of ``target.name`` does its work."""
    original = getattr(target, name)

    def hooked(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(target, name, original)
        hook()
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, hooked)


def rescuer(services, worker_id: str = "rescuer", *, leases_later: int = 2) -> Worker:
    """Another worker whose clock stands still ``leases_later`` leases from now, after every
    lease taken so far (by a worker on the real clock, or a rescuer fewer leases later)."""
    later = utcnow() + services.worker.lease * leases_later
    return Worker(
        services.commands, services.fleet, find_work=services.jobs.vms_with_unfinished_jobs,
        placement=services.worker.placement, worker_id=worker_id, clock=lambda: later,
        lease_s=services.worker.lease.total_seconds(),
        step_attempts=services.worker.step_attempts, max_attempts=services.worker.max_attempts,
    )


def run_until_quiet(services, worker: Worker, rounds: int = 20) -> None:
    """Projection catch-up and passes of ``worker`` until no job is left to run."""
    for _ in range(rounds):
        services.projections.catch_up()
        if not worker.run_pending():
            services.projections.catch_up()
            return
    raise AssertionError(f"jobs still running after {rounds} rounds")


def copies(services, vm_uuid: str) -> list[tuple[str, str]]:
    """(server, power state) of every copy of the VM in the simulated world."""
    return [(c["server_uuid"], c["state"]) for c in services.fleet.copies(vm_uuid)]


def steps_by(services, vm_uuid: str, worker_id: str) -> list[str]:
    """The names of the steps ``worker_id`` recorded for the VM, in order."""
    return [e.step["name"] for e in stream(services, vm_uuid)
            if isinstance(e, Vm.JobStepRecorded) and e.cause["actor"] == f"worker:{worker_id}"]


def state_events(services, vm_uuid: str) -> list[str]:
    """The lifecycle events of the VM (the ones that move its state), in order."""
    names = [type(e).__name__ for e in stream(services, vm_uuid)]
    return [n for n in names if n in ("Provisioned", "ProvisionFailed", "Started", "Stopped",
                                      "Rebooted", "Failed", "Destroyed")]


def assert_not_stranded(services, vm_uuid: str, now: datetime) -> None:
    """A VM in ``provisioning`` has a live job: its head job is queued, or running under a
    lease that has not expired at ``now``."""
    vm = services.commands.load(vm_uuid)
    if vm.state != "provisioning":
        return
    head = vm.head_job
    assert head is not None, "provisioning with no job left to finish it"
    assert head["execution"] in ("queued", "running"), head
    if head["execution"] == "running":
        assert datetime.fromisoformat(head["lease_expires_at"]) > now, head


# -- 1. a worker killed after it claimed the provision ---------------------------------------


@pytest.mark.parametrize("dies_in, after_the_work, boots", [
    ("ensure_state", False, 1),  # registered, never booted: the rescuer boots it
    ("ensure_state", True, 1),  # registered and booted, then died before recording it
], ids=["registered", "registered-and-booted"])
def test_a_provision_whose_worker_died_after_creating_the_vm_is_provisioned_where_it_was_created(
    services, monkeypatch, dies_in, after_the_work, boots,
):
    accepted = create(services)
    dies_once(monkeypatch, services.fleet, dies_in, after_the_work=after_the_work)
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)
    [(server_uuid, _)] = copies(services, accepted.vm_uuid)
    assert_not_stranded(services, accepted.vm_uuid, utcnow())

    assert rescuer(services).run_vm(accepted.vm_uuid)

    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid) == ("running", server_uuid)
    assert state_events(services, accepted.vm_uuid) == ["Provisioned"]
    assert copies(services, accepted.vm_uuid) == [(server_uuid, "running")]
    assert services.fleet.boots(accepted.vm_uuid) == boots
    provision = job(services, accepted.job_uuid)
    assert (provision["execution"], provision["attempt"]) == ("succeeded", 2)
    assert steps_by(services, accepted.vm_uuid, "rescuer")[0] == "reconcile"


@pytest.mark.parametrize("dies_in", ["placement", "ensure_registered"])
def test_a_provision_whose_worker_died_before_creating_the_vm_is_carried_on_by_its_takeover(
    services, monkeypatch, dies_in,
):
    # row P1: every server answered it has no copy and took the rescuer's fence, so the lost
    # worker can make none; with attempts left the provision goes on (it used to fail: half
    # the kills of a tester's run failed customers' provisions)
    accepted = create(services)
    target = services.worker if dies_in == "placement" else services.fleet
    dies_once(monkeypatch, target, dies_in)
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)
    assert_not_stranded(services, accepted.vm_uuid, utcnow())

    assert rescuer(services).run_vm(accepted.vm_uuid)

    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "running" and vm.server_uuid is not None
    assert state_events(services, accepted.vm_uuid) == ["Provisioned"]
    assert copies(services, accepted.vm_uuid) == [(vm.server_uuid, "running")]
    assert services.fleet.boots(accepted.vm_uuid) == 1
    provision = job(services, accepted.job_uuid)
    assert (provision["execution"], provision["attempt"]) == ("succeeded", 2)
    assert steps_by(services, accepted.vm_uuid, "rescuer") == [
        "reconcile", "place", "ensure_registered", "ensure_state"]
    reconcile = next(step for step in provision["chain_results"] if step["name"] == "reconcile")
    assert reconcile["result"] == {"state": "absent", "carry_on": True}


def test_a_provision_given_up_before_the_vm_was_created_fails_and_leaves_nothing(
    services, monkeypatch,
):
    # with no attempts left the takeover fails what never happened, as before
    accepted = create(services)
    services.worker.max_attempts = 1
    dies_once(monkeypatch, services.fleet, "ensure_registered")
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)

    assert rescuer(services).run_vm(accepted.vm_uuid)

    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid, vm.claim) == ("failed", None, None)
    assert state_events(services, accepted.vm_uuid) == ["ProvisionFailed"]
    assert copies(services, accepted.vm_uuid) == []
    provision = job(services, accepted.job_uuid)
    assert provision["execution"] == "failed" and "gave up" in provision["error"], provision


# -- 2. a lost response, then a retry that creates nothing twice -----------------------------


@pytest.mark.parametrize("operation", ["ensure_registered", "ensure_state"])
def test_a_step_whose_response_was_lost_is_retried_without_creating_or_booting_twice(
    services, operation,
):
    accepted = create(services)
    services.fleet.faults.inject(operation, "lose_response", 1)
    services.worker.run_vm(accepted.vm_uuid)

    provision = job(services, accepted.job_uuid)
    assert provision["execution"] == "succeeded"
    tries = [s for s in provision["chain_results"] if s["name"] == operation]
    assert len(tries) == 2 and "timed out" in tries[0]["error"] and tries[1]["error"] is None
    vm = services.commands.load(accepted.vm_uuid)
    assert copies(services, accepted.vm_uuid) == [(vm.server_uuid, "running")]
    assert services.fleet.boots(accepted.vm_uuid) == 1


# -- 3. the guest shuts down between the boot and the replay ---------------------------------


def test_a_guest_shutdown_after_the_recorded_boot_is_not_undone_by_the_takeover(
    services, monkeypatch,
):
    accepted = create(services)
    dies_once(monkeypatch, JobRun, "succeed")  # after every step was recorded, boot included
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)
    services.fleet.shut_down_guest(accepted.vm_uuid)

    assert rescuer(services).run_vm(accepted.vm_uuid)

    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "stopped"
    assert state_events(services, accepted.vm_uuid) == ["Provisioned", "Stopped"]
    assert copies(services, accepted.vm_uuid) == [(vm.server_uuid, "stopped")]
    assert services.fleet.boots(accepted.vm_uuid) == 1
    assert job(services, accepted.job_uuid)["execution"] == "succeeded"
    assert "ensure_state" not in steps_by(services, accepted.vm_uuid, "rescuer")


# -- 4. a delete in every phase of the provision ---------------------------------------------

# Where the provision stands when the delete arrives: just before the named call does its work.
PHASES = {
    "placed": ("fleet", "ensure_registered"),  # place recorded, nothing created yet
    "registered": ("fleet", "ensure_state"),  # created on its server, not booted
    "booted": ("job", "succeed"),  # every step recorded, the job not ended
}


def _target(services, where: str) -> Any:
    return services.fleet if where == "fleet" else JobRun


def delete_both_ways(services, vm_uuid: str) -> str:
    """DeleteVm of a provisioning VM: version 1 is refused and changes nothing while the VM
    is not placed; once its provision has claimed a server, which the VM object shows, it is
    accepted, as VMAPI's deleteVm checks only ``server_uuid``. Version 2 is accepted, with a
    job of its own (a repeat merges only into a job of its version). Returns version 2's
    destroy job."""
    vm = services.commands.load(vm_uuid)
    first = None
    if vm.shown_server_uuid is None:
        with pytest.raises(UnallocatedVmError):
            act(services, vm_uuid, Action.DESTROY, version=1)
        assert services.commands.load(vm_uuid).version == vm.version
    else:
        first = act(services, vm_uuid, Action.DESTROY, version=1).job_uuid
        assert first is not None
    accepted = act(services, vm_uuid, Action.DESTROY, version=2)
    assert accepted.job_uuid is not None and accepted.job_uuid != first
    assert_not_stranded(services, vm_uuid, utcnow())
    return accepted.job_uuid


def assert_destroyed_without_a_trace(services, vm_uuid: str, destroy_job: str) -> None:
    vm = services.commands.load(vm_uuid)
    assert vm.state == "destroyed" and vm.active_jobs == []
    assert copies(services, vm_uuid) == []
    assert job(services, destroy_job)["execution"] == "succeeded"


def test_a_delete_of_a_vm_whose_provision_is_queued_cancels_it_and_leaves_nothing(services):
    accepted = create(services)
    destroy_job = delete_both_ways(services, accepted.vm_uuid)
    assert job(services, accepted.job_uuid)["execution"] == "canceled"
    run_until_quiet(services, services.worker)
    assert_destroyed_without_a_trace(services, accepted.vm_uuid, destroy_job)


@pytest.mark.parametrize("phase", PHASES)
def test_a_delete_while_the_provision_runs_waits_for_it_then_destroys_the_vm(
    services, monkeypatch, phase,
):
    accepted = create(services)
    where, name = PHASES[phase]
    deleted: list[str] = []
    first_calls(monkeypatch, _target(services, where), name,
                lambda: deleted.append(delete_both_ways(services, accepted.vm_uuid)))
    services.worker.run_vm(accepted.vm_uuid)
    assert deleted, "the delete was never asked"
    assert job(services, accepted.job_uuid)["execution"] == "succeeded"
    assert_not_stranded(services, accepted.vm_uuid, utcnow())

    run_until_quiet(services, services.worker)

    assert_destroyed_without_a_trace(services, accepted.vm_uuid, deleted[0])


@pytest.mark.parametrize("phase", PHASES)
def test_a_delete_after_the_provisions_worker_died_is_done_once_the_provision_is_taken_over(
    services, monkeypatch, phase,
):
    accepted = create(services)
    where, name = PHASES[phase]
    dies_once(monkeypatch, _target(services, where), name)
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)
    assert_not_stranded(services, accepted.vm_uuid, utcnow())
    destroy_job = delete_both_ways(services, accepted.vm_uuid)

    late = rescuer(services)
    assert late.run_vm(accepted.vm_uuid)  # the provision, taken over
    assert job(services, accepted.job_uuid)["attempt"] == 2
    assert services.commands.load(accepted.vm_uuid).state != "provisioning"
    run_until_quiet(services, late)

    assert_destroyed_without_a_trace(services, accepted.vm_uuid, destroy_job)


# -- a provision that ends failed after a takeover leaves nothing behind ---------------------


def test_a_provision_given_up_after_its_workers_kept_dying_adopts_the_vm_they_booted(
    services, monkeypatch,
):
    """Giving up is not undoing: the last takeover, with no attempts left, finds the VM the
    first worker booted and adopts it (issue #13, input 4)."""
    accepted = create(services)
    dies_once(monkeypatch, services.fleet, "ensure_state", after_the_work=True)
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)  # attempt 1: created and booted it
    for attempt in (2, 3):  # the rescuers die too, asking the compute nodes what is there
        dies_once(monkeypatch, services.fleet, "observe")
        with pytest.raises(WorkerDied):
            rescuer(services, f"rescuer-{attempt}", leases_later=2 * attempt).run_vm(
                accepted.vm_uuid)
    [(server_uuid, _)] = copies(services, accepted.vm_uuid)

    assert rescuer(services, "last", leases_later=8).run_vm(accepted.vm_uuid)  # attempt 4

    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid) == ("running", server_uuid)
    provision = job(services, accepted.job_uuid)
    assert (provision["execution"], provision["attempt"]) == ("succeeded", 4)
    assert copies(services, accepted.vm_uuid) == [(server_uuid, "running")]
    assert services.fleet.boots(accepted.vm_uuid) == 1


def test_a_takeover_whose_boot_keeps_failing_fails_the_provision_and_removes_the_copy(
    services, monkeypatch,
):
    accepted = create(services)
    dies_once(monkeypatch, services.fleet, "ensure_state")  # created, never booted
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)
    services.fleet.faults.inject("ensure_state", "fail", services.worker.step_attempts)

    assert rescuer(services).run_vm(accepted.vm_uuid)

    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid) == ("failed", None)
    assert job(services, accepted.job_uuid)["execution"] == "failed"
    assert copies(services, accepted.vm_uuid) == []
    # and so a delete, finding no server, leaves nothing behind either
    destroy_job = act(services, accepted.vm_uuid, Action.DESTROY).job_uuid
    run_until_quiet(services, services.worker)
    assert_destroyed_without_a_trace(services, accepted.vm_uuid, destroy_job)
