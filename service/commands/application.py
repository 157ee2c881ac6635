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

from domain.errors import (
    DuplicateVmError, VersionMismatchError, VmNotFoundError,
)
from domain.server import Server
from domain.states import JOB_FOR_ACTION, Action, JobName, VmState
from domain.vm import Cause, Vm
from service.commands.fleet import ServerCommands, VolumeCommands
from service.commands.idempotency import IdempotencyKey, IdempotencyStore, KeyRecord
from service.commands.retry import ConflictRetriesExhaustedError, back_off
from service.commands.snapshots import snapshot_long_streams
from service.commands.versioning import Behaviour

R = TypeVar("R")


class VmLedger(Application[UUID]):
    """The event store of every VM stream. The name is pinned: it names the tables."""

    name = "vmledger"
    log_section_size = 1000
    is_snapshotting_enabled = True  # taken by Commands.save (service/commands/snapshots.py)


class _Replayed(Exception):  # noqa: N818 - control flow, never leaves this module
    """The idempotency key was already used for this request: its first outcome."""

    def __init__(self, outcome: Accepted):
        self.outcome = outcome


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
    volumes: list[dict[str, str]] = field(default_factory=list)  # [{volume_uuid, mountpoint}]


@dataclass(frozen=True)
class Accepted:
    """A command's outcome: the VM, its job, the VM version and the log position after it.

    ``position`` is None when nothing was appended (a repeat that returned an existing job).
    """

    vm_uuid: str
    job_uuid: str | None
    version: int
    position: int | None


class Commands(ServerCommands, VolumeCommands):
    """The command handlers shared by the HTTP API, the worker and the trace replay."""

    def __init__(self, app: VmLedger, *, keys: IdempotencyStore, retries: int = 30,
                 on_conflict: Callable[[], None] | None = None,
                 server_status: Callable[[str], str | None] = lambda _server_uuid: None):
        self.app = app
        self.server_status = server_status
        # Why a VM is stuck now, or None (wired to service.commands.quarantine; lesson 3 of design.md).
        self.is_stuck: Callable[[Vm], str | None] = lambda _vm: None
        # The trace replay records where the trace says tasks ran, whatever the capacity.
        self.enforce_capacity = True
        self.keys = keys
        self.retries = retries
        self.on_conflict = on_conflict or (lambda: None)
        self.after_save: list[Callable[[int], None]] = []

    # -- reading the truth ------------------------------------------------------------------

    def load(self, vm_uuid: str | UUID, version: int | None = None) -> Vm:
        """The VM folded from its stream (at ``version`` if given). Raises VmNotFoundError."""
        try:
            vm_id = vm_uuid if isinstance(vm_uuid, UUID) else UUID(str(vm_uuid))
            vm = self.app.repository.get(vm_id, version=version)
        except (AggregateNotFoundError, ValueError):
            raise VmNotFoundError(vm_uuid) from None
        if not isinstance(vm, Vm):
            raise VmNotFoundError(vm_uuid)  # another aggregate's stream (a server's)
        return vm

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
        idempotency: IdempotencyKey | None = None,
        outcome: Callable[[R, Vm], Accepted] | None = None,
    ) -> tuple[R, Vm, int | None]:
        """Load, ``decide`` (which may record events on the VM), save; on a conflict with
        another writer reload and decide again. Returns (decision, VM, position or None).

        With ``idempotency`` (and ``outcome``, which says what to remember), the key is stored
        with the events; a key already used for this request raises ``_Replayed``.
        Raises ``VersionMismatchError`` when ``if_match`` is not the current version, whatever
        ``decide`` raises, ``IdempotencyKeyReusedError`` or ``ConflictRetriesExhaustedError``.
        """
        for _attempt in range(self.retries):
            self._replay_if_known(idempotency)
            vm = self.load(vm_uuid)
            if if_match is not None and vm.version != if_match:
                raise VersionMismatchError(if_match, vm.version)
            decision = decide(vm)
            record = None
            if idempotency is not None and outcome is not None:
                record = self.keys.record(idempotency, 202, outcome(decision, vm))
            if not vm.pending_events:
                if record is not None:
                    self._store_key_alone(record)
                return decision, vm, None
            servers = self._server_effects(vm)
            try:
                position = self.save(vm, *servers, idempotency=record)
            except IntegrityError:
                self.on_conflict()
                back_off(_attempt)
                continue
            return decision, vm, position
        raise ConflictRetriesExhaustedError(f"VM {vm_uuid}: {self.retries} conflicting writes")

    def _replay_if_known(self, idempotency: IdempotencyKey | None) -> None:
        if idempotency is None:
            return
        prior = self.keys.find(idempotency)
        if prior is not None:
            prior.pop("status")
            raise _Replayed(Accepted(**prior))

    def _store_key_alone(self, record: KeyRecord) -> None:
        try:
            self.keys.insert_alone(record)
        except IntegrityError:
            self._replay_if_known(record.key)  # a twin request stored it first

    def save(self, *aggregates: Vm | Server, idempotency: KeyRecord | None = None) -> int:
        """Append the aggregates' pending events in one transaction (with the idempotency
        key, if any); returns the log position of the last. Raises ``IntegrityError`` when
        another writer changed one of the streams first."""
        kwargs: dict[str, Any] = {}
        if idempotency is not None:
            kwargs = {
                "idempotency": idempotency,
                "idempotency_expired_before": idempotency.created_at - self.keys.ttl_s,
            }
        recordings = self.app.save(*aggregates, **kwargs)
        position = recordings[-1].notification.id
        snapshot_long_streams(self.app, recordings)
        for callback in self.after_save:
            callback(position)
        return position

    # -- client commands ----------------------------------------------------------------------

    def create_vm(self, spec: VmSpec, *, cause: Cause, vm_uuid: str | None = None,
                  idempotency: IdempotencyKey | None = None,
                  context: dict[str, Any] | None = None) -> Accepted:
        """Record a new VM with its provision job queued (VMAPI CreateVm, 202); ``context``
        (the VMAPI client's ``x-context``) is kept in the job's ``params.context``.

        A client-chosen ``vm_uuid`` is idempotent the VMAPI way: a second create with the same
        uuid and the same spec returns the first result; another spec raises
        ``DuplicateVmError``. Raises ``IdempotencyKeyReusedError``, and ``ValidationError``
        naming ``volumes`` when a volume to mount does not exist.
        """
        self._check_volumes(spec.volumes)
        try:
            for _attempt in range(self.retries):
                self._replay_if_known(idempotency)
                vm = self._new_vm(spec, cause, vm_uuid, context)
                result = Accepted(str(vm.id), vm.head_job["uuid"], vm.version, None)
                record = self.keys.record(idempotency, 202, result) if idempotency else None
                try:
                    position = self.save(vm, idempotency=record)
                except IntegrityError:
                    if vm_uuid is not None and self._exists(vm_uuid):
                        return self._same_create(vm_uuid, spec)
                    continue  # a twin request with the same key won; the next pass replays it
                return Accepted(result.vm_uuid, result.job_uuid, result.version, position)
        except _Replayed as replayed:
            return replayed.outcome
        raise ConflictRetriesExhaustedError(f"create: {self.retries} conflicting writes")

    @staticmethod
    def _new_vm(spec: VmSpec, cause: Cause, vm_uuid: str | None,
                context: dict[str, Any] | None = None) -> Vm:
        return Vm.create(
            vm_uuid=UUID(vm_uuid) if vm_uuid else uuidlib.uuid4(),
            provision_job_uuid=str(uuidlib.uuid4()),
            provision_params={
                "args": {"server_uuid": spec.server_uuid} if spec.server_uuid else {},
                "if_already": "succeed",
                **({"context": context} if context is not None else {}),
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
            volumes=[dict(mount) for mount in spec.volumes],
        )

    def _exists(self, vm_uuid: str) -> bool:
        try:
            self.load(vm_uuid, version=1)
        except VmNotFoundError:
            return False
        return True

    def _same_create(self, vm_uuid: str, spec: VmSpec) -> Accepted:
        """The first create's result if ``spec`` repeats it; else ``DuplicateVmError``."""
        first = self.load(vm_uuid, version=2)  # Created, then the provision's JobQueued
        provision = first.active_jobs[0]
        pinned = provision["params"].get("args", {}).get("server_uuid")
        asked = VmSpec(
            owner_uuid=first.quarantine["previous_owner_uuid"] if first.quarantine
            else first.owner_uuid,
            brand=first.brand, ram=first.ram, alias=first.alias, image_uuid=first.image_uuid,
            cpu_cap=first.cpu_cap, persistence=first.persistence,
            customer_metadata=first.customer_metadata, internal_metadata=first.internal_metadata,
            tags=first.tags, server_uuid=pinned, volumes=first.volumes,
        )
        if asked != spec:
            raise DuplicateVmError(vm_uuid)
        return Accepted(vm_uuid, provision["uuid"], self.load(vm_uuid).version, None)

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
        idempotency: IdempotencyKey | None = None,
    ) -> Accepted:
        """Queue the job for ``action`` (start, stop, kill, reboot, update, destroy), as
        ``behaviour``'s API version rules; a repeat of an active job returns that job and
        appends nothing (api.md). Raises the refusals of ``Behaviour.admit``,
        ``VmNotFoundError`` (also for another owner's VM), ``VersionMismatchError`` and
        ``IdempotencyKeyReusedError``.
        """
        name = JOB_FOR_ACTION[action]
        args = args or {}
        if action is Action.KILL:
            args = {**args, "force": True}

        def decide(vm: Vm) -> str | None:
            if owner_uuid is not None and vm.owner_uuid != owner_uuid:
                raise VmNotFoundError(vm_uuid)
            existing = vm.matching_active_job(name.value, args)
            if existing is not None:
                return existing["uuid"]
            if action is Action.DESTROY:
                stuck = self.is_stuck(vm)
                if stuck is not None and VmState(vm.state) is not VmState.QUARANTINED:
                    return self._quarantine_instead(vm, stuck, {**cause, "job_uuid": None})
            server_removed = (action is Action.DESTROY and vm.server_uuid is not None
                              and self.server_status(vm.server_uuid) == "removed")
            plan = behaviour.admit(VmState(vm.state), action, vm_uuid=vm_uuid,
                                   idempotent=idempotent, server_removed=server_removed)
            job_cause = {**cause, "job_uuid": None}
            if plan.destroy_now:
                for job in list(vm.active_jobs):
                    if job["execution"] == "queued":
                        vm.cancel_job(job["uuid"], "canceled: the VM was destroyed",
                                      cause=job_cause)
                vm.record_destroyed(cause=job_cause)
                return None
            job_uuid = str(uuidlib.uuid4())
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

        try:
            job_uuid, vm, position = self.change(
                vm_uuid, decide, if_match=if_match, idempotency=idempotency,
                outcome=lambda job, vm: Accepted(str(vm.id), job, vm.version, None),
            )
        except _Replayed as replayed:
            return replayed.outcome
        return Accepted(str(vm.id), job_uuid, vm.version, position)

    @staticmethod
    def _quarantine_instead(vm: Vm, stuck: str, cause: Cause) -> str:
        """A DELETE of a stuck VM quarantines it rather than racing the stuck job (design.md,
        lesson 3): the owner gets the usual accepted answer, and a destroy job that records,
        canceled, why it did not run."""
        job_uuid = str(uuidlib.uuid4())
        vm.queue_job(action=Action.DESTROY, job_uuid=job_uuid, name=JobName.DESTROY.value,
                     params={"args": {}, "if_already": "succeed"}, cause=cause)
        for job in list(vm.active_jobs):
            if job["execution"] == "queued":
                vm.cancel_job(job["uuid"], f"not run: the VM was {stuck}; it was quarantined "
                              "for troubleshooting instead", cause=cause)
        vm.record_quarantined(f"deleted by its owner while {stuck}", cause=cause)
        return job_uuid

    # -- facts observed on compute nodes ------------------------------------------------------

    def record_failure(self, vm_uuid: str, reason: str, message: str, *, cause: Cause) -> Accepted:
        """Record that a running VM stopped working (``reason``: ``evicted`` when its host took
        it away, ``crashed`` when its guest died); its desired state is left as it was, so a
        VM that should run is told apart (design.md). Raises ``VmNotFoundError`` and
        ``IllegalTransitionError`` (the VM is not running)."""
        _, vm, position = self.change(
            vm_uuid, lambda vm: vm.record_failed(reason, message, cause=cause)
        )
        return Accepted(str(vm.id), None, vm.version, position)
