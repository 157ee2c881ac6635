"""The vmledger application: the event store and the command handlers.

Each command loads the VM, lets the aggregate decide, and saves with optimistic concurrency.
A conflict with another writer (worker, agent, another API process) is resolved by reloading
and deciding again, ``retries`` times at most (api.md, "Concurrency and idempotency").
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError

from domain.errors import VersionMismatchError, VmNotFoundError
from domain.states import JOB_FOR_ACTION, Action, JobName, VmState
from domain.vm import Cause, Vm
from service.versioning import Behaviour

R = TypeVar("R")


class VmLedger(Application[UUID]):
    """The event store of every VM stream. The name is pinned: it names the tables."""

    name = "vmledger"
    log_section_size = 1000


class ConflictRetriesExhaustedError(Exception):
    """Other writers kept winning; the client may retry (503)."""


@dataclass(frozen=True)
class VmSpec:
    """What CreateVm asks for (api.md, ``POST /vms``). RAM in MiB."""

    owner_uuid: str
    brand: str
    ram: int
    alias: str | None = None
    image_uuid: str | None = None
    cpu_cap: int | None = None
    persistence: str = "persistent"
    customer_metadata: dict[str, Any] = field(default_factory=dict)
    internal_metadata: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    server_uuid: str | None = None  # pin the VM to this server


@dataclass(frozen=True)
class Accepted:
    """A command's outcome: the VM, its job, the VM version and the log position after it.

    ``position`` is None when nothing was appended (a repeat that returned an existing job).
    """

    vm_uuid: str
    job_uuid: str | None
    version: int
    position: int | None


class Commands:
    """The command handlers shared by the HTTP API, the worker and the trace replay."""

    def __init__(self, app: VmLedger, *, retries: int = 10,
                 on_conflict: Callable[[], None] | None = None):
        self.app = app
        self.retries = retries
        self.on_conflict = on_conflict or (lambda: None)
        self.after_save: list[Callable[[int], None]] = []

    # -- reading the truth ------------------------------------------------------------------

    def load(self, vm_uuid: str | UUID, version: int | None = None) -> Vm:
        """The VM folded from its stream (at ``version`` if given). Raises VmNotFoundError."""
        try:
            vm_id = vm_uuid if isinstance(vm_uuid, UUID) else UUID(str(vm_uuid))
            return self.app.repository.get(vm_id, version=version)
        except (AggregateNotFoundError, ValueError):
            raise VmNotFoundError(vm_uuid) from None

    def head_position(self) -> int:
        """The log's last position (0 when empty)."""
        return self.app.recorder.max_notification_id() or 0

    # -- the retry loop every change goes through ---------------------------------------------

    def change(
        self,
        vm_uuid: str | UUID,
        decide: Callable[[Vm], R],
        *,
        if_match: int | None = None,
    ) -> tuple[R, Vm, int | None]:
        """Load, ``decide`` (which may record events on the VM), save; on a conflict with
        another writer reload and decide again. Returns (decision, VM, position or None).

        Raises ``VersionMismatchError`` when ``if_match`` is not the current version, whatever
        ``decide`` raises, or ``ConflictRetriesExhaustedError``.
        """
        for _attempt in range(self.retries):
            vm = self.load(vm_uuid)
            if if_match is not None and vm.version != if_match:
                raise VersionMismatchError(if_match, vm.version)
            decision = decide(vm)
            if not vm.pending_events:
                return decision, vm, None
            try:
                position = self._save(vm)
            except IntegrityError:
                self.on_conflict()
                continue
            return decision, vm, position
        raise ConflictRetriesExhaustedError(f"VM {vm_uuid}: {self.retries} conflicting writes")

    def _save(self, *aggregates: Vm) -> int:
        recordings = self.app.save(*aggregates)
        position = recordings[-1].notification.id
        for callback in self.after_save:
            callback(position)
        return position

    # -- client commands ----------------------------------------------------------------------

    def create_vm(self, spec: VmSpec, *, cause: Cause, vm_uuid: str | None = None) -> Accepted:
        """Record a new VM with its provision job queued (VMAPI CreateVm, 202).

        Raises ``IntegrityError`` when ``vm_uuid`` names an existing VM.
        """
        job_uuid = str(uuidlib.uuid4())
        vm = Vm.create(
            vm_uuid=UUID(vm_uuid) if vm_uuid else uuidlib.uuid4(),
            provision_job_uuid=job_uuid,
            provision_params={
                "args": {"server_uuid": spec.server_uuid} if spec.server_uuid else {},
                "if_already": "succeed",
            },
            cause={**cause, "job_uuid": None},
            owner_uuid=spec.owner_uuid,
            alias=spec.alias,
            brand=spec.brand,
            ram=spec.ram,
            cpu_cap=spec.cpu_cap,
            image_uuid=spec.image_uuid,
            persistence=spec.persistence,
            customer_metadata=spec.customer_metadata,
            internal_metadata=spec.internal_metadata,
            tags=spec.tags,
        )
        position = self._save(vm)
        return Accepted(str(vm.id), job_uuid, vm.version, position)

    def request_action(
        self,
        vm_uuid: str,
        action: Action,
        *,
        behaviour: Behaviour,
        cause: Cause,
        args: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        idempotent: bool = False,
        if_match: int | None = None,
        owner_uuid: str | None = None,
    ) -> Accepted:
        """Queue the job for ``action`` (start, stop, kill, reboot, update, destroy), as
        ``behaviour``'s API version rules; a repeat of an active job returns that job and
        appends nothing (api.md). Raises the refusals of ``Behaviour.admit``,
        ``VmNotFoundError`` (also for another owner's VM) and ``VersionMismatchError``.
        """
        name = JOB_FOR_ACTION[action]
        args = args or {}
        if action is Action.KILL:
            args = {**args, "force": True}

        def decide(vm: Vm) -> str:
            if owner_uuid is not None and vm.owner_uuid != owner_uuid:
                raise VmNotFoundError(vm_uuid)
            existing = vm.matching_active_job(name.value, args)
            if existing is not None:
                return existing["uuid"]
            plan = behaviour.admit(
                VmState(vm.state), action, vm_uuid=vm_uuid, idempotent=idempotent
            )
            job_uuid = str(uuidlib.uuid4())
            job_cause = {**cause, "job_uuid": None}
            if plan.cancel_queued_provision:
                for job in list(vm.active_jobs):
                    if job["name"] == JobName.PROVISION and job["execution"] == "queued":
                        vm.cancel_job(job["uuid"], "canceled by a DeleteVm", cause=job_cause)
            params = {"args": args, "if_already": plan.if_already.value,
                      "api_version": behaviour.version}
            if context is not None:
                params["context"] = context
            vm.queue_job(action=action, job_uuid=job_uuid, name=name.value, params=params,
                         cause=job_cause)
            return job_uuid

        job_uuid, vm, position = self.change(vm_uuid, decide, if_match=if_match)
        return Accepted(str(vm.id), job_uuid, vm.version, position)
