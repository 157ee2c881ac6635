"""A worker paused in a compute call, whose job another worker took over meanwhile, does not
carry the call out when it resumes (docs/jobs.md, "Fencing"): every compute operation of a
job carries the job's fence, each node remembers the newest it has seen per VM, and an
operation with an older one is refused there. The resumed worker records nothing, and its
step is not applied: a later job (a start, an update) is not undone, a reboot not repeated,
a failed VM not created.

Worker A (``services.worker``) is "paused" in the call (before its work) by a hook that runs
everything worker B does meanwhile: B's clock stands two leases later, so it takes the job
over (as after ``kill -STOP``) and runs the jobs after it. Then A resumes. No sleeps, both
backends.
"""

from __future__ import annotations

import inspect
import threading
import uuid
from collections.abc import Callable

import pytest

from domain.states import Action
from projections.db import Dialect
from service.jobs.compute import simulated
from service.jobs.compute.driver import ComputeDriver, Fence, FencedOffError, Incarnation
from service.jobs.compute.simulated import SimulatedFleet, simulated_server_uuid
from service.replay.trace import TraceDriver
from tests.builders import act, create, job, settle
from tests.integration.test_job_faults import (
    copies, first_calls, rescuer, state_events, steps_by,
)
from tests.integration.test_takeovers import running_vm
from tests.waiting import wait_until

BOOTS = ("Provisioned", "Started", "Rebooted")


def paused_in(services, monkeypatch, call: str, vm_uuid: str, meanwhile) -> list[str]:
    """Worker A claims the VM's head job and is paused in ``call`` while ``meanwhile`` runs;
    then it resumes and its run ends. Returns the steps A recorded in that run."""
    before = len(steps_by(services, vm_uuid, services.worker.worker_id))
    first_calls(monkeypatch, services.fleet, call, meanwhile)
    assert services.worker.run_vm(vm_uuid)
    return steps_by(services, vm_uuid, services.worker.worker_id)[before:]


def boots_recorded(services, vm_uuid: str) -> int:
    """How many boots the log records: a boot begins with each provision, start and reboot."""
    return sum(1 for name in state_events(services, vm_uuid) if name in BOOTS)


def test_a_stop_resumed_after_a_takeover_and_a_later_start_does_not_stop_the_vm(
        services, monkeypatch, json_logs):
    vm_uuid = running_vm(services)
    stop = act(services, vm_uuid, Action.STOP).job_uuid
    b = rescuer(services, "b")

    def meanwhile() -> None:
        assert b.run_vm(vm_uuid)  # the stop, taken over
        act(services, vm_uuid, Action.START)
        assert b.run_vm(vm_uuid)

    assert paused_in(services, monkeypatch, "ensure_state", vm_uuid, meanwhile) == []

    [(_, power)] = copies(services, vm_uuid)
    assert power == "running"
    assert services.commands.load(vm_uuid).state == "running"
    assert state_events(services, vm_uuid)[-2:] == ["Stopped", "Started"]
    assert job(services, stop)["execution"] == "succeeded"
    taken = [line for line in json_logs() if line.get("job_uuid") == stop
             and "was taken from" in line["message"]]
    assert len(taken) == 1 and "fenced off" in taken[0]["message"]


def test_a_reboot_resumed_after_a_takeover_and_a_later_start_does_not_boot_again(
        services, monkeypatch):
    vm_uuid = running_vm(services)
    act(services, vm_uuid, Action.REBOOT)
    b = rescuer(services, "b")

    def meanwhile() -> None:
        assert b.run_vm(vm_uuid)  # the reboot, taken over
        for action in (Action.STOP, Action.START):  # a later run not begun by the reboot
            act(services, vm_uuid, action)
            assert b.run_vm(vm_uuid)

    assert paused_in(services, monkeypatch, "ensure_state", vm_uuid, meanwhile) == []

    assert services.fleet.boots(vm_uuid) == boots_recorded(services, vm_uuid) == 3
    assert services.fleet.running_copies(vm_uuid) == 1


@pytest.mark.parametrize("attempts_left", [True, False], ids=["carried-on", "given-up"])
def test_a_provision_resumed_after_its_takeover_creates_no_copy(
        services, monkeypatch, attempts_left):
    accepted = create(services)
    if not attempts_left:
        services.worker.max_attempts = 1
    b = rescuer(services, "b")

    def meanwhile() -> None:
        # finds no copy anywhere: carries the provision on (row P1), or with no attempts
        # left fails it; either way its looks fenced the paused worker off everywhere
        assert b.run_vm(accepted.vm_uuid)

    assert paused_in(services, monkeypatch, "ensure_registered", accepted.vm_uuid,
                     meanwhile) == ["place"]  # its claim, before it was paused

    vm = services.commands.load(accepted.vm_uuid)
    if attempts_left:  # b's copy alone, booted once: the resumed call made none
        assert vm.state == "running" and vm.server_uuid is not None
        assert copies(services, accepted.vm_uuid) == [(vm.server_uuid, "running")]
        assert services.fleet.boots(accepted.vm_uuid) == 1
    else:
        assert (vm.state, vm.server_uuid, vm.claim) == ("failed", None, None)
        assert copies(services, accepted.vm_uuid) == []
    act(services, accepted.vm_uuid, Action.DESTROY)
    settle(services)
    assert services.commands.load(accepted.vm_uuid).state == "destroyed"
    assert copies(services, accepted.vm_uuid) == []


def test_an_update_resumed_after_a_takeover_and_a_later_update_does_not_undo_it(
        services, monkeypatch):
    vm_uuid = running_vm(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    act(services, vm_uuid, Action.UPDATE, args={"alias": "first"})
    b = rescuer(services, "b")

    def meanwhile() -> None:
        assert b.run_vm(vm_uuid)  # the update, taken over
        act(services, vm_uuid, Action.UPDATE, args={"alias": "second"})
        assert b.run_vm(vm_uuid)

    assert paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile) == []

    assert services.fleet.config(server_uuid, vm_uuid) == {"alias": "second"}
    assert services.commands.load(vm_uuid).alias == "second"


# -- the node: the simulated fleet's fences ---------------------------------------------------

OLDER, NEWER = Fence("job-a", 5), Fence("job-b", 9)
SERVER, OTHER_SERVER = simulated_server_uuid(0), simulated_server_uuid(1)

# Each operation on a VM, as asked with a fence; each would change the running copy on SERVER
# (ensure_registered: create one on OTHER_SERVER) if it were done.
OPERATIONS: dict[str, Callable[[SimulatedFleet, str, Fence], object]] = {
    "ensure_registered": lambda fleet, vm, fence: fleet.ensure_registered(
        OTHER_SERVER, vm, ram_mib=128, metadata={}, fence=fence),
    "observe": lambda fleet, vm, fence: fleet.observe(SERVER, vm, fence=fence),
    "ensure_state": lambda fleet, vm, fence: fleet.ensure_state(
        SERVER, vm, "rebooted", effect="job-a", fence=fence),
    "unregister": lambda fleet, vm, fence: fleet.unregister(SERVER, vm, fence=fence),
    "reconfigure": lambda fleet, vm, fence: fleet.reconfigure(
        SERVER, vm, {"alias": "a"}, fence=fence),
    "raise_fence": lambda fleet, vm, fence: fleet.raise_fence(SERVER, vm, fence=fence),
}


def a_running_copy(fleet: SimulatedFleet) -> str:
    """A new VM running on SERVER (asked with no fence, as a test may)."""
    vm_uuid = str(uuid.uuid4())
    fleet.ensure_registered(SERVER, vm_uuid, ram_mib=128, metadata={})
    fleet.ensure_state(SERVER, vm_uuid, "running", effect="provision")
    return vm_uuid


def test_every_operation_of_the_protocol_on_a_vm_takes_a_fence_and_is_tested_here() -> None:
    operations = {name: inspect.signature(call) for name, call in vars(ComputeDriver).items()
                  if not name.startswith("_") and callable(call)}
    fenced = {name for name, signature in operations.items()
              if "fence" in signature.parameters}
    assert fenced == {name for name, signature in operations.items()
                      if "vm_uuid" in signature.parameters} == set(OPERATIONS)


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_an_operation_with_an_older_fence_than_the_vm_has_seen_is_refused_and_does_nothing(
        services, operation):
    fleet = services.fleet
    vm_uuid = a_running_copy(fleet)
    fleet.observe(SERVER, vm_uuid, fence=NEWER)
    fleet.raise_fence(OTHER_SERVER, vm_uuid, fence=NEWER)  # where ensure_registered asks
    before = fleet.copies(vm_uuid), fleet.config(SERVER, vm_uuid)

    with pytest.raises(FencedOffError, match="has seen epoch 9 .job job-b."):
        OPERATIONS[operation](fleet, vm_uuid, OLDER)

    assert (fleet.copies(vm_uuid), fleet.config(SERVER, vm_uuid)) == before
    OPERATIONS[operation](fleet, vm_uuid, NEWER)  # the newest holder is still let through


def test_a_fence_is_admitted_again_and_a_newer_one_fences_it_off_for_good(services):
    fleet = services.fleet
    vm_uuid, other_vm = a_running_copy(fleet), a_running_copy(fleet)
    fleet.observe(SERVER, vm_uuid, fence=OLDER)
    fleet.observe(SERVER, vm_uuid, fence=OLDER)  # the same holder again (a retried call)
    assert fleet.ensure_state(SERVER, vm_uuid, "stopped", fence=NEWER).state == "stopped"
    fleet.unregister(SERVER, vm_uuid, fence=NEWER)
    fleet.reboot_server(SERVER)

    # fences are per VM on each server, and outlive the copy and its host's reboot
    assert fleet.observe(SERVER, other_vm, fence=OLDER) is None
    with pytest.raises(FencedOffError):
        fleet.ensure_registered(SERVER, vm_uuid, ram_mib=128, metadata={}, fence=OLDER)
    assert fleet.copies(vm_uuid) == []


def test_a_step_and_the_admission_of_its_fence_are_one_transaction(services, monkeypatch):
    """Worker A's stop has admitted its fence and not yet committed when B's takeover looks:
    B waits for A's transaction and sees the VM stopped. Were the fence admitted apart from
    the step, B would see it running and A would stop it after B looked."""
    if services.db.dialect is not Dialect.POSTGRES:
        pytest.skip("SQLite's write transactions run one at a time (BEGIN IMMEDIATE)")
    fleet = services.fleet
    vm_uuid = a_running_copy(fleet)
    admitted, go_on = threading.Event(), threading.Event()
    admit = simulated.admit

    def admit_then_hold(tx, server, vm, fence):
        admit(tx, server, vm, fence)
        if fence == OLDER:
            admitted.set()
            assert go_on.wait(30)

    monkeypatch.setattr(simulated, "admit", admit_then_hold)
    a = threading.Thread(target=fleet.ensure_state, args=(SERVER, vm_uuid, "stopped"),
                         kwargs={"fence": OLDER})
    a.start()
    assert admitted.wait(30)
    seen: list[object] = []
    b = threading.Thread(target=lambda: seen.append(fleet.observe(SERVER, vm_uuid, fence=NEWER)))
    b.start()
    try:
        wait_until(lambda: _lock_waiters(services), "B's look to wait for A's lock on the fences")
    finally:
        go_on.set()
        a.join()
        b.join()
    assert [run.state for run in seen] == ["stopped"]


def _lock_waiters(services) -> int:
    """How many sessions of this database wait now for a lock on the fences."""
    with services.db.transaction(commit=False) as tx:
        tx.execute("SELECT count(*) AS waiting FROM pg_stat_activity "
                   "WHERE datname = current_database() AND wait_event_type = 'Lock' "
                   "AND query LIKE ?", ("%sim_fences%",))
        return tx.fetchone()["waiting"]


def test_the_trace_replays_driver_refuses_an_older_fence_too():
    driver = TraceDriver()
    driver.ensure_registered("machine", "vm", ram_mib=128, metadata={}, fence=NEWER)

    with pytest.raises(FencedOffError):
        driver.ensure_state("machine", "vm", "running", fence=OLDER)

    assert driver.observe("machine", "vm", fence=NEWER) == Incarnation("stopped", 1)
