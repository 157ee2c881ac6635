"""One-line builders for tests: causes, VMs in a given state, specs, and a driver loop."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from domain import chain
from domain.states import JOB_FOR_ACTION, Action, VmState
from domain.vm import Cause, Vm, make_cause
from service.commands.application import Accepted, VmSpec
from service.container import Services
from service.commands.versioning import NEWEST, OLDEST, Behaviour

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def cause(actor: str = "test") -> Cause:
    """A cause for events recorded by a test."""
    return make_cause(actor, request_id="req-test")


def new_job_uuid() -> str:
    """A fresh job uuid (as a string, as the aggregate keeps it)."""
    return str(uuid.uuid4())


def new_vm(**overrides: Any) -> Vm:
    """A freshly created VM (Created + JobQueued(provision) still pending)."""
    fields: dict[str, Any] = dict(
        vm_uuid=uuid.uuid4(), owner_uuid=OWNER, brand="bhyve", ram=1024,
        provision_job_uuid=new_job_uuid(), cause=cause(),
    )
    fields.update(overrides)
    return Vm.create(**fields)


def run_head_job(vm: Vm, record: Any = None, *, worker: str = "w1", now: datetime = T0) -> str:
    """Start the head job, let ``record(vm)`` add lifecycle events, and succeed it."""
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker=worker, now=now, lease_expires_at=now + LEASE, cause=cause())
    if record is not None:
        record(vm)
    vm.succeed_job(job_uuid, cause=cause(), worker=worker)
    return job_uuid


def queue(vm: Vm, action: Action, **args: Any) -> str:
    """Queue the job for ``action`` (with ``args``) as version 1 does; return its uuid."""
    job_uuid = new_job_uuid()
    vm.queue_job(action=action, job_uuid=job_uuid, name=JOB_FOR_ACTION[action].value,
                 params={"args": args, "if_already": "fail"}, cause=cause())
    return job_uuid


def vm_in(state: VmState, **overrides: Any) -> Vm:
    """A VM brought to ``state`` by the events that lead there, with no pending events left
    (so ``vm.collect_events()`` afterwards returns only what a test's command recorded)."""
    vm = new_vm(**overrides)
    server = "8b9a0ee4-0000-4000-8000-000000000001"
    if state is not VmState.PROVISIONING:
        if state is VmState.FAILED:
            run_head_job(vm, lambda v: v.record_provision_failed("no room", cause=cause(),
                                                                 copy_may_be_on=[]))
        else:
            run_head_job(vm, lambda v: v.record_provisioned(server, cause=cause()))
    if state is VmState.STOPPED:
        queue(vm, Action.STOP)
        run_head_job(vm, lambda v: v.record_stopped(cause=cause()))
    elif state is VmState.DESTROYED:
        queue(vm, Action.DESTROY)
        run_head_job(vm, lambda v: v.record_destroyed(cause=cause()))
    elif state is VmState.QUARANTINED:
        vm.record_quarantined("stuck", cause=cause())
    vm.collect_events()
    assert vm.state == state
    return vm


def recorded(vm: Vm) -> list[str]:
    """The names of the events recorded on ``vm`` since the last call (the "then")."""
    return [type(event).__name__ for event in vm.collect_events()]


def spec(**overrides: Any) -> VmSpec:
    """A CreateVm request of 1 GiB for the test owner."""
    fields: dict[str, Any] = dict(owner_uuid=OWNER, brand="bhyve", ram=1024)
    fields.update(overrides)
    return VmSpec(**fields)


def create(services: Services, **overrides: Any) -> Accepted:
    """CreateVm through the commands."""
    return services.commands.create_vm(spec(**overrides), cause=cause())


def act(services: Services, vm_uuid: str, action: Action, *, version: int = 2,
        **kwargs: Any) -> Accepted:
    """``request_action`` as API version ``version`` (1 or 2)."""
    behaviour: Behaviour = NEWEST if version == 2 else OLDEST
    return services.commands.request_action(
        vm_uuid, action, behaviour=behaviour, cause=cause(), **kwargs
    )


def insert_v1_created(app: Any, vm_id: UUID) -> dict[str, Any]:
    """Store in ``app``'s recorder, as the first event of stream ``vm_id``, a ``Created`` of
    class version 1 (before VMs mounted volumes: no ``volumes``, no ``class_version``),
    linked as it was then; its fields as stored, ``chain`` included."""
    created = Vm.create(vm_uuid=vm_id, owner_uuid=OWNER, brand="bhyve", ram=128,
                        provision_job_uuid="job-1", cause=make_cause())
    fields = {k: v for k, v in vars(created.pending_events[0]).items()
              if k not in ("originator_id", "originator_version", "volumes")}
    fields["chain"] = chain.link(chain.GENESIS, vm_id, 1, Vm.Created.TOPIC, fields)
    app.recorder.insert_events([StoredEvent(
        originator_id=vm_id, originator_version=1, topic=Vm.Created.TOPIC,
        state=app.mapper.transcoder.encode(fields))])
    return fields


def settle(services: Services, rounds: int = 20) -> None:
    """Alternate projection catch-up and worker passes until no job is left to run."""
    for _ in range(rounds):
        services.projections.catch_up()
        if not services.worker.run_pending():
            services.projections.catch_up()
            return
    raise AssertionError(f"jobs still running after {rounds} rounds")


def stream(services: Services, vm_uuid: str) -> list[Any]:
    """Every stored event of one VM, oldest first."""
    return list(services.app.events.get(UUID(vm_uuid)))


def event_names(services: Services, vm_uuid: str) -> list[str]:
    """The type names of a VM's stored events, oldest first."""
    return [type(event).__name__ for event in stream(services, vm_uuid)]


def job(services: Services, job_uuid: str) -> dict[str, Any]:
    """The job object from ``job_view`` (the projection is caught up first)."""
    services.projections.catch_up()
    found = services.jobs.get(job_uuid)
    assert found is not None, job_uuid
    return found


def rows(services: Services, table: str, order_by: str = "uuid") -> list[dict[str, Any]]:
    """The whole content of a read-model table, in a stable order (bytes kept as bytes)."""
    with services.db.transaction(commit=False) as tx:
        tx.execute(f"SELECT * FROM {table} ORDER BY {order_by}")
        return [{k: bytes(v) if isinstance(v, memoryview) else v for k, v in row.items()}
                for row in tx.fetchall()]


def read_model_tables(services: Services, *, tracking: bool = False
                      ) -> dict[str, list[dict[str, Any]]]:
    """Every row of every read model's live tables, each table in a stable order; with
    ``tracking``, also the live read models' ``projection_tracking`` rows (not shadows')."""
    found = {table: sorted(rows(services, table, order_by="1"), key=repr)
             for read_model in services.projections.read_models.values()
             for table in read_model.real_tables()}
    if tracking:
        live = set(services.projections.read_models)
        found["projection_tracking"] = [
            row for row in rows(services, "projection_tracking", order_by="name")
            if row["name"] in live]
    return found


def a_mix_of_commands_and_jobs(services: Services) -> list[str]:
    """Several VMs through provisions (good and failed), actions of both API versions,
    updates, a canceled provision and destroys; every job run to its end. Returns the VMs."""
    good = [create(services, alias=f"vm-{n}", tags={"n": str(n)}).vm_uuid for n in range(3)]
    settle(services)
    act(services, good[0], Action.STOP, version=1)
    act(services, good[0], Action.STOP, version=1, args={"again": True})
    act(services, good[1], Action.REBOOT)
    act(services, good[1], Action.UPDATE, args={"alias": "renamed", "tags": {"n": "x"}})
    act(services, good[2], Action.DESTROY)
    too_big = create(services, ram=services.settings.sim_server_ram_mib + 1).vm_uuid
    doomed = create(services).vm_uuid
    act(services, doomed, Action.DESTROY, version=2)
    settle(services)
    act(services, good[0], Action.START)
    act(services, too_big, Action.DESTROY)
    settle(services)
    return [*good, too_big, doomed]
