"""The job worker and the job handlers against the simulated fleet, on both backends."""

from __future__ import annotations

import collections
import threading
from typing import Any

import pytest

from domain.server import Server
from domain.states import Action
from domain.vm import Vm
from service.jobs.compute.simulated import place
from service.jobs.worker import Worker, utcnow
from tests.builders import act, cause, create, job, settle, stream


def copies(services, vm_uuid: str) -> list[dict[str, Any]]:
    """Every copy of a VM in the simulated world (one per server it exists on)."""
    return [dict(copy) for copy in services.fleet.copies(vm_uuid)]


def running_vm(services, **overrides: Any) -> str:
    """A VM provisioned and running; its uuid."""
    vm_uuid = create(services, **overrides).vm_uuid
    settle(services)
    assert services.commands.load(vm_uuid).state == "running"
    return vm_uuid


def stopped_vm(services) -> str:
    """A VM provisioned and then stopped; its uuid."""
    vm_uuid = running_vm(services)
    act(services, vm_uuid, Action.STOP)
    settle(services)
    assert services.commands.load(vm_uuid).state == "stopped"
    return vm_uuid


# -- provision -------------------------------------------------------------------------------


def test_provision_places_the_vm_on_a_server_with_free_capacity_and_records_it(services):
    before = {s.uuid: s.ram_free_mib for s in services.fleet.servers()}
    accepted = create(services, ram=2048)
    settle(services)
    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "running" and vm.server_uuid in before
    assert before[vm.server_uuid] >= 2048
    [copy] = copies(services, accepted.vm_uuid)
    assert (copy["server_uuid"], copy["state"]) == (vm.server_uuid, "running")
    assert services.fleet.server_info(vm.server_uuid).ram_allocated_mib == 2048
    provision = job(services, accepted.job_uuid)
    assert provision["execution"] == "succeeded"
    assert [s["name"] for s in provision["chain_results"]] == [
        "place", "ensure_registered", "ensure_state"]


def test_placement_picks_the_server_with_most_free_ram_that_fits(services):
    servers = services.fleet.servers()
    assert place(servers, 1) is not None
    assert place(servers, max(s.ram_free_mib for s in servers) + 1) is None


def test_a_vm_whose_ram_fits_no_server_fails_its_provision_at_the_place_step(services):
    too_big = services.settings.sim_server_ram_mib + 1
    accepted = create(services, ram=too_big)
    settle(services)
    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "failed" and vm.server_uuid is None
    assert vm.error["reason"] == "provision_failed"
    provision = job(services, accepted.job_uuid)
    assert provision["execution"] == "failed"
    last = provision["chain_results"][-1]
    assert last["name"] == "place" and f"{too_big} MiB" in last["error"]
    assert copies(services, accepted.vm_uuid) == []


def test_force_provision_failure_in_internal_metadata_fails_the_provision(services):
    accepted = create(services, internal_metadata={"force_provision_failure": "true"})
    settle(services)
    assert services.commands.load(accepted.vm_uuid).state == "failed"
    provision = job(services, accepted.job_uuid)
    assert provision["execution"] == "failed"
    assert "force_provision_failure" in provision["chain_results"][-1]["error"]
    assert copies(services, accepted.vm_uuid) == []  # nothing half-made is left behind


# -- actions whose target already holds ------------------------------------------------------


def test_v1_stop_of_a_stopped_vm_makes_a_job_that_fails_as_vmapi_does(services):
    vm_uuid = stopped_vm(services)
    accepted = act(services, vm_uuid, Action.STOP, version=1)
    settle(services)
    stop = job(services, accepted.job_uuid)
    assert stop["execution"] == "failed"
    assert stop["error"] == "Cannot stop a VM from a 'stopped' state"
    assert stop["chain_results"][-1]["error"] == "Cannot stop a VM from a 'stopped' state"
    assert services.commands.load(vm_uuid).state == "stopped"


@pytest.mark.parametrize("how", ["v2", "v1-idempotent"])
def test_v2_or_idempotent_stop_of_a_stopped_vm_succeeds_doing_nothing(services, how):
    vm_uuid = stopped_vm(services)
    version_before = services.commands.load(vm_uuid).version
    accepted = act(services, vm_uuid, Action.STOP, version=2 if how == "v2" else 1,
                   idempotent=how == "v1-idempotent")
    settle(services)
    stop = job(services, accepted.job_uuid)
    assert stop["execution"] == "succeeded" and stop["error"] is None
    assert stop["chain_results"][-1]["error"] is None
    names = [type(e).__name__ for e in stream(services, vm_uuid)][version_before:]
    assert "Stopped" not in names  # nothing happened to the VM itself


# -- delete racing with provisioning ---------------------------------------------------------


class DriverSpy:
    """Counts the compute operations asked for each VM."""

    def __init__(self, services, monkeypatch):
        self.calls: list[tuple[str, str]] = []
        for name in ("ensure_registered", "ensure_state", "unregister"):
            original = getattr(services.fleet, name)
            monkeypatch.setattr(services.fleet, name, self._spy(name, original))

    def _spy(self, name, original):
        def call(server_uuid, vm_uuid, *args, **kwargs):
            self.calls.append((name, vm_uuid))
            return original(server_uuid, vm_uuid, *args, **kwargs)
        return call

    def for_vm(self, vm_uuid: str) -> list[str]:
        return [name for name, vm in self.calls if vm == vm_uuid]


def test_v2_delete_of_a_provisioning_vm_cancels_the_provision_and_touches_no_compute_node(
    services, monkeypatch
):
    spy = DriverSpy(services, monkeypatch)
    created = create(services)
    deleted = act(services, created.vm_uuid, Action.DESTROY, version=2)
    settle(services)
    vm = services.commands.load(created.vm_uuid)
    assert vm.state == "destroyed" and vm.server_uuid is None
    assert job(services, created.job_uuid)["execution"] == "canceled"
    destroy = job(services, deleted.job_uuid)
    assert destroy["execution"] == "succeeded"
    assert [s["name"] for s in destroy["chain_results"]] == ["mark_destroyed"]
    assert spy.for_vm(created.vm_uuid) == []
    assert copies(services, created.vm_uuid) == []


def test_delete_of_a_running_vm_unregisters_it_from_its_server(services):
    vm_uuid = running_vm(services)
    deleted = act(services, vm_uuid, Action.DESTROY, version=1)
    settle(services)
    assert services.commands.load(vm_uuid).state == "destroyed"
    assert [s["name"] for s in job(services, deleted.job_uuid)["chain_results"]] == ["unregister"]
    assert copies(services, vm_uuid) == []


# -- chain_results -------------------------------------------------------------------------


def test_an_update_naming_a_field_that_cannot_be_updated_fails_its_job_and_the_worker_goes_on(
    services,
):
    vm_uuid = running_vm(services)
    bad = act(services, vm_uuid, Action.UPDATE, args={"ram": 4096})
    good = act(services, vm_uuid, Action.UPDATE, args={"alias": "renamed"})
    settle(services)
    failed = job(services, bad.job_uuid)
    assert failed["execution"] == "failed" and "ram" in failed["error"]
    assert failed["chain_results"][-1]["error"]
    assert job(services, good.job_uuid)["execution"] == "succeeded"
    assert services.commands.load(vm_uuid).alias == "renamed"


def test_every_terminal_job_ends_with_a_chain_result_whose_error_tells_its_outcome(services):
    running = running_vm(services)
    act(services, running, Action.REBOOT)
    act(services, running, Action.STOP, version=1)
    act(services, running, Action.STOP, version=1, args={"note": "again"})  # fails: stopped
    act(services, running, Action.UPDATE, args={"alias": "x"})
    act(services, running, Action.UPDATE, args={"brand": "kvm"})  # fails: not updatable
    act(services, running, Action.START, version=2)
    create(services, ram=services.settings.sim_server_ram_mib * 2)  # fails at place
    create(services, internal_metadata={"force_provision_failure": "true"})
    doomed = create(services)
    act(services, doomed.vm_uuid, Action.DESTROY, version=2)  # cancels the provision
    settle(services)
    jobs = services.jobs.list()
    assert {j["execution"] for j in jobs} == {"succeeded", "failed", "canceled"}
    for each in jobs:
        chain = each["chain_results"]
        assert chain, each
        assert (chain[-1]["error"] is not None) == (each["execution"] != "succeeded"), each
        assert (each["error"] is not None) == (each["execution"] != "succeeded"), each


# -- racing workers --------------------------------------------------------------------------


def test_two_workers_racing_on_the_same_vms_never_both_run_a_job(services):
    vm_uuids = [create(services).vm_uuid for _ in range(4)]
    for vm_uuid in vm_uuids:
        act(services, vm_uuid, Action.STOP, version=2)
        act(services, vm_uuid, Action.UPDATE, args={"alias": "a"})
        act(services, vm_uuid, Action.START, version=2)
    services.projections.catch_up()
    workers = [
        Worker(services.commands, services.fleet, find_work=services.jobs.vms_with_unfinished_jobs,
               placement=services.worker.placement, lease_s=300, worker_id=f"racer-{n}")
        for n in (1, 2)
    ]
    barrier = threading.Barrier(2, timeout=10)
    ran: dict[str, int] = {}
    errors: list[BaseException] = []

    def race(worker: Worker) -> None:
        try:
            barrier.wait()
            ran[worker.worker_id] = worker.run_pending()
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=race, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    started = collections.Counter(
        e.job_uuid for vm_uuid in vm_uuids for e in stream(services, vm_uuid)
        if type(e).__name__ == "JobStarted"
    )
    assert len(started) == 16  # every job (4 provisions + 12 actions) was started...
    assert set(started.values()) == {1}  # ...exactly once
    assert sum(ran.values()) == 16
    assert {services.commands.load(v).state for v in vm_uuids} == {"running"}


# -- lease takeover --------------------------------------------------------------------------


def test_a_provision_taken_over_after_its_worker_died_keeps_the_vm_where_it_was_created(
    services, monkeypatch
):
    accepted = create(services)
    ensure_state = services.fleet.ensure_state

    def die_once(server_uuid, vm_uuid, state, *, effect=None, fence=None):
        monkeypatch.setattr(services.fleet, "ensure_state", ensure_state)
        raise RuntimeError("the worker process died here")

    monkeypatch.setattr(services.fleet, "ensure_state", die_once)
    with pytest.raises(RuntimeError, match="died"):
        services.worker.run_vm(accepted.vm_uuid)
    [first] = copies(services, accepted.vm_uuid)
    after_the_lease = services.worker.lease * 2
    rescuer = Worker(
        services.commands, services.fleet, find_work=services.jobs.vms_with_unfinished_jobs,
        placement=services.worker.placement, worker_id="rescuer",
        clock=lambda: utcnow() + after_the_lease,
    )
    assert rescuer.run_vm(accepted.vm_uuid)
    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "running" and vm.server_uuid == first["server_uuid"]
    # Still one copy, where it was created, now running: no second copy elsewhere.
    assert [(c["server_uuid"], c["state"]) for c in copies(services, accepted.vm_uuid)] == [
        (first["server_uuid"], "running")]
    provision = job(services, accepted.job_uuid)
    assert provision["execution"] == "succeeded" and provision["attempt"] == 2


def test_a_v1_delete_whose_vm_was_destroyed_before_its_ticket_succeeds_doing_nothing(services):
    vm_uuid = running_vm(services)
    act(services, vm_uuid, Action.STOP)  # holds the ticket while the delete waits behind it
    deleted = act(services, vm_uuid, Action.DESTROY, version=1)
    # Something else (an ephemeral VM's host rebooting) destroys the VM meanwhile.
    services.commands.change(Vm, vm_uuid, lambda vm: vm.record_destroyed(cause=cause("agent")))
    settle(services)
    destroy = job(services, deleted.job_uuid)
    assert destroy["execution"] == "succeeded"
    assert destroy["chain_results"][-1]["error"] is None


def test_a_worker_that_renews_no_leases_runs_its_jobs_without_a_renewal_thread(
        services, monkeypatch):
    # The trace replay's worker: nothing competes with it, so no thread a job renews a lease.
    from service.jobs.run import JobRun

    def no_thread(_run: JobRun) -> None:
        raise AssertionError("a lease renewal thread was started")

    monkeypatch.setattr(JobRun, "keep_lease", no_thread)
    worker = Worker(services.commands, services.fleet, find_work=list, worker_id="alone",
                    placement=lambda vm: [services.fleet.servers()[0].uuid],
                    renew_leases=False)
    accepted = create(services)
    assert worker.run_vm(accepted.vm_uuid)
    assert job(services, accepted.job_uuid)["execution"] == "succeeded"


def test_a_provision_placed_on_a_server_its_driver_does_not_know_moves_to_the_next(services):
    # A server registered in the log that the compute driver cannot reach (tester B, B8):
    # the claim there is given back and the VM is placed on the next candidate.
    ghost = "aaaaaaaa-bbbb-4ccc-8ddd-ffffffffffff"
    services.commands.register_server(ghost, hostname="ghost", boot_id="b", ram_mib=1 << 20,
                                      cpus=64, cause=cause())
    real = services.fleet.servers()[0].uuid
    worker = Worker(services.commands, services.fleet, find_work=list, worker_id="w",
                    placement=lambda vm: [ghost, real])
    accepted = create(services)
    assert worker.run_vm(accepted.vm_uuid)
    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid) == ("running", real)
    assert services.commands.load_server(ghost).claims == {}
    assert accepted.vm_uuid in services.commands.load_server(real).claims
    steps = job(services, accepted.job_uuid)["chain_results"]
    assert [(s["name"], s["result"], s["error"]) for s in steps[:3]] == [
        ("place", ghost, None),
        ("ensure_registered", None, f"unknown server {ghost}"),
        ("release", ghost, None)]
    assert [s["name"] for s in steps[3:]] == ["place", "ensure_registered", "ensure_state"]
    assert steps[3]["result"] == real


@pytest.mark.parametrize("removal", ["reported by the fleet", "recorded by an operator"])
def test_a_server_removed_between_the_placement_query_and_the_provision_is_passed_over(
        services, monkeypatch, removal):
    # The shortlist is out of date as soon as it is read: the server at its head goes away
    # before the VM is created there, and the VM is placed on the next candidate.
    query = services.worker.placement
    removed: list[str] = []

    def query_then_remove(vm):
        shortlist = query(vm)
        if removed:  # the provision's next placement: nothing more goes away
            return shortlist
        gone = shortlist[0]
        if removal == "reported by the fleet":
            services.fleet.set_server_status(gone, "removed")
        else:
            services.commands.change(Server, gone, lambda s: s.set_status("removed",
                                                                           cause=cause()))
            services.projections.catch_up()
        removed.append(gone)
        return shortlist

    monkeypatch.setattr(services.worker, "placement", query_then_remove)
    accepted = create(services)
    settle(services)
    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "running" and vm.server_uuid not in removed
    assert services.commands.load_server(removed[0]).claims == {}
    assert [c["server_uuid"] for c in copies(services, accepted.vm_uuid)] == [vm.server_uuid]
    steps = [(s["name"], s["result"], s["error"])
             for s in job(services, accepted.job_uuid)["chain_results"]]
    if removal == "reported by the fleet":  # claimed, refused by the driver, given back
        assert steps[:3] == [("place", removed[0], None), ("ensure_registered", None,
                             f"server {removed[0]} is removed"), ("release", removed[0], None)]
    else:  # the server's stream refuses the claim: the next candidate is claimed at once
        assert steps[0] == ("place", vm.server_uuid, None)
    assert [name for name, _, _ in steps[-3:]] == ["place", "ensure_registered", "ensure_state"]
