"""Random interleavings of commands, jobs, worker deaths, lease expiries and takeovers keep the
job machinery's promises (design.md: the ticket, the lease, the takeover that reconciles).

Hypothesis draws a short program of operations (create a VM; an action of API version 1 or
2; run one job; a worker that claims the head job and dies, maybe after some of its compute
calls; the fake clock moving past the lease; a takeover by another worker); the test runs it,
then lets a worker finish every job, checks the invariants, and deletes every VM it made.
The seed is fixed and no example database is kept, so CI runs the same programs every time.
Both backends: about 5 s on SQLite and 10 s on PostgreSQL when the machine is idle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from domain.errors import (
    InvalidTransitionError,
    JobNotRunnableError,
    UnallocatedVmError,
    VmAlreadyDestroyedError,
    VmBeingDestroyedError,
)
from domain.states import Action
from domain.vm import Vm, make_cause
from projections.vm_view import render_vm
from service.commands.application import VmSpec
from service.container import Services
from service.commands.versioning import NEWEST, OLDEST
from service.jobs.worker import Worker, utcnow

OWNER = "5d0c4f4e-2b6a-4d43-9a53-7d0c0c1f0a11"
# What a client may be told instead of 202: the documented refusals, nothing else (no 5xx).
REFUSALS = (UnallocatedVmError, InvalidTransitionError, VmAlreadyDestroyedError,
            VmBeingDestroyedError)
ACTIONS = (Action.START, Action.STOP, Action.REBOOT, Action.UPDATE, Action.DESTROY)
COMPUTE_CALLS = ("ensure_registered", "ensure_state", "unregister", "inventory")


class WorkerDied(Exception):
    """The worker process died here (nothing in the service catches this)."""


class DyingDriver:
    """The simulated fleet, except that the worker using it dies at its call number
    ``calls + 1`` to a compute node (an operation, or a look at a server's inventory), before
    that call does its work or (``after_the_work``) just after."""

    def __init__(self, fleet: Any, calls: int, after_the_work: bool):
        self._fleet = fleet
        self._left = calls
        self._after = after_the_work

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._fleet, name)
        return self._dying(attribute, name) if name in COMPUTE_CALLS else attribute

    def _dying(self, call: Callable[..., Any], name: str) -> Callable[..., Any]:
        def maybe_die(*args: Any, **kwargs: Any) -> Any:
            if self._left > 0:
                self._left -= 1
                return call(*args, **kwargs)
            if self._after:
                call(*args, **kwargs)
            raise WorkerDied(f"died in {name}")
        return maybe_die


class World:
    """The services under test, a fake clock every worker reads, and the VMs made so far."""

    def __init__(self, services: Services):
        self.services = services
        self.now: datetime = utcnow()
        self.lease = services.worker.lease
        self.vm_uuids: list[str] = []
        self.workers = 0
        self.actions = 0

    def worker(self, driver: Any = None) -> Worker:
        self.workers += 1
        return Worker(
            self.services.commands, driver or self.services.fleet,
            find_work=self.services.jobs.vms_with_unfinished_jobs,
            placement=self.services.worker.placement, worker_id=f"w{self.workers}",
            clock=lambda: self.now, lease_s=self.lease.total_seconds(),
            max_attempts=2,  # a third start gives the job up: short programs get there too
        )

    def vm(self, index: int | str) -> str:
        """The VM numbered ``index`` (modulo how many there are), or named by its uuid."""
        return index if isinstance(index, str) else self.vm_uuids[index % len(self.vm_uuids)]

    # -- the operations -------------------------------------------------------------------

    def create(self) -> None:
        accepted = self.services.commands.create_vm(
            VmSpec(owner_uuid=OWNER, brand="bhyve", ram=256), cause=make_cause("client"))
        self.vm_uuids.append(accepted.vm_uuid)

    def act(self, index: int, action: Action, version: int) -> None:
        vm_uuid = self.vm(index)
        self.actions += 1
        args = {"alias": f"alias-{self.actions}"} if action is Action.UPDATE else None
        with contextlib.suppress(*REFUSALS):
            self.services.commands.request_action(
                vm_uuid, action, behaviour=NEWEST if version == 2 else OLDEST,
                cause=make_cause("client"), args=args)

    def run_one_job(self, index: int) -> None:
        self.worker().run_vm(self.vm(index))

    def crash(self, index: int, calls: int, after_the_work: bool, late: bool) -> None:
        """A worker claims the VM's head job and dies, right after its claim (``calls`` < 0)
        or at its call number ``calls + 1`` to a compute node; a job needing fewer ends.
        ``late``: it comes after the lease, so it may be a takeover that dies too."""
        vm_uuid = self.vm(index)
        if late:
            self.advance_past_the_lease()
        if calls < 0:
            dead, head = self.worker(), self.services.commands.load(vm_uuid).head_job
            if head is None:
                return
            # (another worker may hold it: then this one cannot even claim it)
            with contextlib.suppress(JobNotRunnableError):
                self.services.commands.change(Vm, vm_uuid, lambda vm: vm.start_job(
                    head["uuid"], worker=dead.worker_id, now=self.now,
                    lease_expires_at=self.now + self.lease, cause=make_cause(dead.worker_id)))
            return
        with contextlib.suppress(WorkerDied):
            self.worker(DyingDriver(self.services.fleet, calls, after_the_work)).run_vm(vm_uuid)

    def advance_past_the_lease(self) -> None:
        self.now += self.lease + timedelta(seconds=1)

    def take_over(self, index: int) -> None:
        self.advance_past_the_lease()
        self.worker().run_vm(self.vm(index))

    def run(self, operation: tuple[Any, ...]) -> None:
        name, *args = operation
        if name != "create" and not self.vm_uuids:
            self.create()
        getattr(self, name)(*args)

    def finish_every_job(self, rounds: int = 30) -> None:
        """Workers (the clock past every lease) until no job is left."""
        live = self.worker()
        for _ in range(rounds):
            self.advance_past_the_lease()
            self.services.projections.catch_up()
            if not live.run_pending() and not any(
                    self.services.commands.load(v).active_jobs for v in self.vm_uuids):
                self.services.projections.catch_up()
                return
        raise AssertionError(f"jobs still left after {rounds} rounds")


# -- the invariants ----------------------------------------------------------------------------


def assert_one_running_job_at_most(vm: Vm) -> None:
    running = [j for j in vm.active_jobs if j["execution"] == "running"]
    assert len(running) <= 1 and (not running or running[0] is vm.active_jobs[0]), vm.active_jobs


def assert_not_stranded(vm: Vm, now: datetime | None) -> None:
    """Provisioning only with a job to finish it: queued, or running (with a lease unexpired
    at ``now`` when given: a lease that expired is a takeover still to come)."""
    if vm.state != "provisioning":
        return
    head = vm.head_job
    assert head is not None and head["execution"] in ("queued", "running"), vm.active_jobs
    if now is not None and head["execution"] == "running":
        assert datetime.fromisoformat(head["lease_expires_at"]) > now, head


def assert_jobs_never_overlapped(events: list[Any]) -> None:
    """Walking the log: no job started while another job of the VM was running."""
    holder: str | None = None
    for event in events:
        if isinstance(event, Vm.JobStarted):
            assert holder in (None, event.job_uuid), f"{event.job_uuid} started while {holder} ran"
            holder = event.job_uuid
        elif isinstance(event, Vm.JobSucceeded | Vm.JobFailed):
            holder = None


def assert_every_ended_provision_moved_the_vm_on(services: Services, vm_uuid: str,
                                                 events: list[Any]) -> None:
    """A provision that succeeded or failed left the VM out of ``provisioning`` in the same
    save; one that was canceled left that to the destroy that canceled it."""
    provision = next(e.job_uuid for e in events if isinstance(e, Vm.JobQueued))
    for event in events:
        if isinstance(event, Vm.JobSucceeded | Vm.JobFailed) and event.job_uuid == provision:
            at_its_end = services.commands.load(vm_uuid, version=event.originator_version)
            assert at_its_end.state != "provisioning", event
        if isinstance(event, Vm.JobCanceled) and event.job_uuid == provision:
            assert any(isinstance(e, Vm.Destroyed) for e in events), "canceled, never destroyed"


def assert_the_fleet_holds_it_only_where_the_log_says(services: Services, vm: Vm) -> None:
    copies = services.fleet.copies(str(vm.id))
    assert services.fleet.running_copies(str(vm.id)) <= 1, copies
    where = {vm.server_uuid} if vm.state not in ("destroyed", "failed") else set()
    assert {c["server_uuid"] for c in copies} <= where, (vm.state, vm.server_uuid, copies)


_OPERATIONS = {
    "create": st.tuples(st.just("create")),
    "act": st.tuples(st.just("act"), st.integers(0, 2), st.sampled_from(ACTIONS),
                     st.sampled_from([1, 2])),
    "run_one_job": st.tuples(st.just("run_one_job"), st.integers(0, 2)),
    "crash": st.tuples(st.just("crash"), st.integers(0, 2), st.integers(-1, 2), st.booleans(),
                       st.booleans()),
    "advance_past_the_lease": st.tuples(st.just("advance_past_the_lease")),
    "take_over": st.tuples(st.just("take_over"), st.integers(0, 2)),
}
# Weighted by repetition: more actions, deaths and expiries than anything else.
_KINDS = ["create", "act", "act", "act", "run_one_job", "crash", "crash", "crash",
          "advance_past_the_lease", "advance_past_the_lease", "take_over"]
OPERATIONS = st.sampled_from(_KINDS).flatmap(_OPERATIONS.__getitem__)


@seed(20260101)
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=st.lists(OPERATIONS, min_size=6, max_size=30))
def test_any_interleaving_of_commands_jobs_crashes_and_takeovers_keeps_the_job_invariants(
    services, program,
):
    # Examples share the fixture's database; each checks only the VMs it made.
    world = World(services)
    for operation in program:
        world.run(operation)
        for vm_uuid in world.vm_uuids:
            vm = services.commands.load(vm_uuid)
            assert_one_running_job_at_most(vm)
            assert_not_stranded(vm, None)
            assert services.fleet.running_copies(vm_uuid) <= 1
    world.finish_every_job()

    for vm_uuid in world.vm_uuids:
        vm = services.commands.load(vm_uuid)
        events = list(services.app.events.get(vm.id))
        assert vm.active_jobs == []
        assert vm.state != "provisioning"
        assert_not_stranded(vm, world.now)
        assert_jobs_never_overlapped(events)
        assert_every_ended_provision_moved_the_vm_on(services, vm_uuid, events)
        assert_the_fleet_holds_it_only_where_the_log_says(services, vm)
        assert services.vms.get(vm_uuid) == render_vm(vm)

    # Whatever happened, every VM can still be deleted, and then nothing of it is left (this
    # also gives the next example, which shares the database, the fleet's capacity back).
    for vm_uuid in world.vm_uuids:
        world.act(vm_uuid, Action.DESTROY, 2)
    world.finish_every_job()
    for vm_uuid in world.vm_uuids:
        assert services.commands.load(vm_uuid).state == "destroyed"
        assert services.fleet.copies(vm_uuid) == []
