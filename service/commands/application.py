"""The vmledger application: the event store and the command handlers.

Each command is a ``decide`` function given to the change loop (``service.commands.change``):
load the VM, let the aggregate decide, save with optimistic concurrency; a conflict with
another writer (worker, agent, another API process) is resolved by reloading and deciding
again, ``retries`` times at most (api.md, "Concurrency and idempotency").
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from eventsourcing.application import Application, Repository, project_aggregate
from eventsourcing.persistence import Mapper, Transcoder

from domain.errors import (
    DuplicateVmError, NothingToUpdateError, UuidTakenError,
)
from domain.job_queue import CANCELED_BY_DELETE_VM, job_params
from domain.states import JOB_FOR_ACTION, Action, JobName, VmState
from domain.vm import Cause, Vm
from service.commands.aliases import AliasCommands, LegacyHolders, no_legacy_holders
from service.commands.change import ANY_VERSION, Accepted, Changed, Changes, IfMatch
from service.commands.checked_mapper import CheckedMapper
from service.commands.committer import Committer
from service.commands.fleet import ServerCommands, VolumeCommands
from service.commands.networks import NetworkCommands, NicRequest
from service.commands.idempotency import IdempotencyKey, IdempotencyStore
from service.commands.snapshot_seal import seal_checking, take_sealed_snapshot
from service.commands.retry import ConflictRetriesExhaustedError
from service.commands.versioning import Behaviour
from service.transcoder import ReusedEncoderTranscoder

# Imported from here by the API and the tests.
__all__ = ["Accepted", "Changed", "Commands", "ConflictRetriesExhaustedError", "VmLedger",
           "VmSpec"]


class VmLedger(Application[UUID]):
    """The event store of every VM stream. The name is pinned: it names the tables."""

    name = "vmledger"
    log_section_size = 1000
    is_snapshotting_enabled = True  # taken by Commands.save (service/commands/snapshots.py)

    def __init__(self, env: Any = None, *, on_datastore: Callable[[Any], None] | None = None):
        """``on_datastore`` is given the factory's datastore before any recorder uses it:
        ``db_limits.bound_pool`` puts in its bounded pool before the library opens its own
        (replacing the open one opened two pools a start)."""
        self._on_datastore = on_datastore
        super().__init__(env)

    def construct_factory(self, env: Any) -> Any:
        """The library's factory, its datastore first given to ``on_datastore``."""
        factory = super().construct_factory(env)
        if self._on_datastore is not None:
            self._on_datastore(factory.datastore)  # type: ignore[attr-defined]
        return factory

    def construct_repository(self) -> Repository[UUID]:
        """The library's repository, refusing a snapshot that does not match the log
        (service/commands/snapshot_seal.py)."""
        return seal_checking(super().construct_repository(), self.mapper.transcoder)

    def take_snapshot(self, aggregate_id: UUID, version: int | None = None,
                      projector_func: Any = project_aggregate) -> None:
        """The library's ``take_snapshot``, but the snapshot carries its seal."""
        take_sealed_snapshot(self, aggregate_id, version, projector_func)

    def construct_mapper(self) -> Mapper[UUID]:
        """The library's mapper, naming the stream and version of an event it cannot read
        (service/commands/checked_mapper.py)."""
        return self.factory.mapper(transcoder=self.construct_transcoder(),
                                   mapper_class=CheckedMapper)

    def construct_transcoder(self) -> Transcoder:
        """The library's JSON transcoder, encoding faster to the same bytes
        (service/transcoder.py)."""
        transcoder = ReusedEncoderTranscoder()
        self.register_transcodings(transcoder)
        return transcoder


@dataclass(frozen=True)
class VmSpec:
    """What CreateVm asks for (api.md, ``POST /vms``). RAM in MiB."""

    owner_uuid: str
    brand: str
    ram: int
    alias: str | None = None
    image_uuid: str | None = None
    cpu_cap: int | None = None
    persistence: str | dict[str, str] = "persistent"  # a preset, or rows (domain/policy.py)
    customer_metadata: dict[str, Any] = field(default_factory=dict)
    internal_metadata: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    server_uuid: str | None = None  # pin the VM to this server
    volumes: list[dict[str, str]] = field(default_factory=list)  # [{volume_uuid, mountpoint}]
    networks: tuple[NicRequest, ...] = ()  # a NIC on each, addresses claimed at create


def never_stuck(_vm: Vm) -> None:
    """The stuck check of a service that quarantines nothing on a DeleteVm."""


class Commands(Changes, ServerCommands, VolumeCommands, NetworkCommands, AliasCommands):
    """The command handlers shared by the HTTP API, the worker and the trace replay."""

    def __init__(self, app: VmLedger, *, keys: IdempotencyStore, retries: int = 30,
                 on_conflict: Callable[[], None] | None = None,
                 server_status: Callable[[str], str | None] = lambda _server_uuid: None,
                 is_stuck: Callable[[Vm], str | None] = never_stuck,
                 enforce_capacity: bool = True,
                 committer: Committer | None = None,
                 after_save: Iterable[Callable[[int], None]] = (),
                 legacy_holders: LegacyHolders = no_legacy_holders,
                 unique_aliases: bool = False):
        """``retries``: attempts of the change loop; ``on_conflict``: called on each conflict
        (the service counts them); ``server_status``: a server's status by uuid
        (``"removed"`` lets a DeleteVm destroy at once); ``is_stuck``: why a VM is stuck now,
        or None (``service.commands.quarantine.StuckCheck``; design.md, lesson 3);
        ``enforce_capacity``: False records claims whatever the capacity (the trace replay);
        ``committer``: the group commit of saves (one of its own by default);
        ``after_save``: called with the log position after each save (more may be added to
        the list ``after_save``: a changefeed subscribes when it starts);
        ``legacy_holders``: the VMs a read model says an owner has with an alias, adopted by
        an alias's reservation (service/commands/aliases.py); ``unique_aliases``: refuse an
        alias another active VM of the owner holds, recording holds (``VMLEDGER_UNIQUE_ALIASES``;
        False, the default, reads and writes nothing about aliases)."""
        self.app = app
        self.server_status = server_status
        self.is_stuck = is_stuck
        self.enforce_capacity = enforce_capacity
        self.keys = keys
        self.retries = retries
        self.on_conflict = on_conflict or (lambda: None)
        self.after_save: list[Callable[[int], None]] = list(after_save)
        self.committer = committer or Committer(app)  # group commit of concurrent saves
        self.legacy_holders = legacy_holders
        self.unique_aliases = unique_aliases

    def load(self, vm_uuid: str | UUID, version: int | None = None) -> Vm:
        """The VM folded from its stream (at ``version`` if given). Raises VmNotFoundError."""
        return self.load_aggregate(Vm, vm_uuid, version)

    def head_position(self) -> int:
        """The log's last position (0 when empty)."""
        return self.app.recorder.max_notification_id() or 0

    # -- client commands ----------------------------------------------------------------------

    def create_vm(self, spec: VmSpec, *, cause: Cause, vm_uuid: str | None = None,
                  idempotency: IdempotencyKey | None = None,
                  context: dict[str, Any] | None = None) -> Accepted:
        """Record a new VM with its provision job queued (VMAPI CreateVm, 202); ``context``
        (the VMAPI client's ``x-context``) is kept in the job's ``params.context``.

        A client-chosen ``vm_uuid`` is idempotent: a second create with the same uuid and the
        same spec returns the first result while the VM is not destroyed; another spec, or a
        destroyed VM, raises ``DuplicateVmError`` (VMAPI refuses every existing uuid); a uuid another resource has (another owner's VM, or another
        kind's) is ``UuidTakenError``. Raises ``IdempotencyKeyReusedError``, and ``ValidationError``
        naming ``volumes`` when a volume to mount does not exist. With ``spec.networks``, each
        NIC's address is claimed on its network in the same transaction
        (service/commands/networks.py; ``NetworkNotFoundError``, ``NetworkFullError``).
        """
        self._check_volumes(spec.volumes)
        vm_id = UUID(vm_uuid) if vm_uuid else uuidlib.uuid4()
        claimed: list[Any] = []  # the networks this attempt claimed addresses on

        def decide(vm: Vm) -> Accepted:
            claimed.clear()
            if vm.pending_events:  # made by this request
                if spec.networks:
                    claimed.extend(self.allocate(vm, list(spec.networks),
                                                 cause={**cause, "job_uuid": None}))
                return Accepted(str(vm.id), vm.head_job["uuid"], vm.version, None)
            return self._same_create(str(vm_id), spec)  # the uuid was taken

        changed = self.change(Vm, vm_id, decide, idempotency_key=idempotency,
                              outcome=lambda result, _vm: result,
                              new=lambda: self._new_vm(spec, cause, vm_id, context),
                              also=lambda _result: list(claimed))
        if changed.replayed is not None:
            return changed.replayed
        return replace(changed.decision, position=changed.position)

    @staticmethod
    def _new_vm(spec: VmSpec, cause: Cause, vm_id: UUID,
                context: dict[str, Any] | None = None) -> Vm:
        return Vm.create(
            vm_uuid=vm_id,
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

    def _same_create(self, vm_uuid: str, spec: VmSpec) -> Accepted:
        """The first create's result if ``spec`` repeats it and the VM is not destroyed; else
        ``DuplicateVmError`` (another spec, or the VM destroyed since), or ``UuidTakenError``
        when the VM is another owner's (whose is not said): one refusal, VMAPI's for a
        duplicate uuid, in every case. A failed VM still answers its failed provision: that
        is what the retried create must learn (api.md, "Idempotency")."""
        first = self.load(vm_uuid, version=2)  # Created, then the provision's JobQueued
        owner = (first.quarantine["previous_owner_uuid"] if first.quarantine
                 else first.owner_uuid)
        if owner != spec.owner_uuid:
            raise UuidTakenError(vm_uuid)
        provision = first.active_jobs[0]
        pinned = provision["params"].get("args", {}).get("server_uuid")
        asked = VmSpec(
            owner_uuid=owner,
            brand=first.brand, ram=first.ram, alias=first.alias, image_uuid=first.image_uuid,
            cpu_cap=first.cpu_cap, persistence=first.persistence,
            customer_metadata=first.customer_metadata, internal_metadata=first.internal_metadata,
            tags=first.tags, server_uuid=pinned, volumes=first.volumes,
            networks=spec.networks,
        )
        # the NICs the first create recorded (its third event) were on the same networks
        nics = self.load(vm_uuid, version=3).nic_list if spec.networks else []
        if asked != spec or [n["network_uuid"] for n in nics] != [
                r.network_uuid for r in spec.networks]:
            raise DuplicateVmError(vm_uuid)
        now = self.load(vm_uuid)
        if VmState(now.state) is VmState.DESTROYED:
            # its provision's outcome no longer tells what the VM is: a retry so late is a
            # new create, and the uuid is taken (VMAPI's validateUniqueUuid)
            raise DuplicateVmError(vm_uuid, "destroyed")
        return Accepted(vm_uuid, provision["uuid"], now.version, None)

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
        if_match: IfMatch = None,
        owner_uuid: str | None = None,
        idempotency: IdempotencyKey | None = None,
    ) -> Accepted:
        """Queue the job for ``action`` (start, stop, kill, reboot, update, destroy), as
        ``behaviour``'s API version rules; a repeat of an active job returns that job and
        appends nothing, where the version admits the request at all (api.md); version 2
        refuses what could only fail behind the VM's destroy job (``VmBeingDestroyedError``).
        Raises the refusals of ``Behaviour.admit``,
        ``VmNotFoundError`` (also for another owner's VM), ``NothingToUpdateError`` (an
        update with no ``args``), ``VersionMismatchError``, ``UpdatePendingError`` (an update
        whose ``if_match`` names the current version while an update job is queued or
        running: ``Vm.require_updates_applied``; a repeat of the last job is answered that
        job, as without the header) and ``IdempotencyKeyReusedError``.
        """
        name = JOB_FOR_ACTION[action]
        args = args or {}
        if action is Action.KILL:
            args = {**args, "force": True}

        def decide(vm: Vm) -> str | None:
            # removed: every server a copy of it may be on (a quarantine during its
            # provision leaves a copy where only its claim tells: Vm.copy_servers); with one
            # live, a job removes the copy there, passing the removed ones over
            # (service/jobs/copies.py)
            copies = vm.copy_servers
            server_removed = (action is Action.DESTROY and bool(copies) and all(
                self.server_status(server) == "removed" for server in copies))
            existing = vm.matching_active_job(name.value, job_params(
                args, behaviour.if_already(action, idempotent=idempotent).value,
                behaviour.version, context))
            if existing is not None:
                # A repeat only where this request is admitted in the VM's state now: its
                # version's refusal answers first (a v2 DELETE of a destroyed VM is
                # VmAlreadyDestroyed, whatever a v1 DELETE queued; api.md), and where it is
                # admitted as a job: a v2 DELETE once the servers were removed destroys at
                # once, as a first one would, rather than answer a job that would fail there.
                if not behaviour.admit(VmState(vm.state), action, vm_uuid=vm_uuid,
                                       idempotent=idempotent, server_removed=server_removed,
                                       has_server=vm.has_server,
                                       placed=vm.shown_server_uuid is not None,
                                       destroy_job=vm.active_destroy).destroy_now:
                    return existing["uuid"]
            if action is Action.DESTROY:
                stuck = self.is_stuck(vm)
                if stuck is not None and VmState(vm.state) is not VmState.QUARANTINED:
                    return self._quarantine_instead(vm, stuck, {**cause, "job_uuid": None})
            # decided on the VM as this attempt read it: a DELETE saved in between makes
            # the save conflict, and the loop decides again on the VM it left (the race of
            # an action with a version 2 DELETE; docs/api.md)
            plan = behaviour.admit(VmState(vm.state), action, vm_uuid=vm_uuid,
                                   idempotent=idempotent, server_removed=server_removed,
                                   has_server=vm.has_server,
                                   placed=vm.shown_server_uuid is not None,
                                   destroy_job=vm.active_destroy)
            if action is Action.UPDATE and not args:
                raise NothingToUpdateError(vm_uuid)
            if action is Action.UPDATE and if_match not in (None, ANY_VERSION):
                # a version the client read (``*`` claims none), checked after the state's
                # refusals (reading again would not change them) and after a repeat of the
                # last job, which asks just what that job will apply, and is answered it
                vm.require_updates_applied()
            job_cause = {**cause, "job_uuid": None}
            if plan.destroy_now:  # its jobs too, the running one included
                vm.record_destroyed_without_job(cause=job_cause)
                return None
            job_uuid = str(uuidlib.uuid4())
            if plan.cancel_queued_provision:  # and the jobs queued behind it
                vm.cancel_queued_provision(CANCELED_BY_DELETE_VM, cause=job_cause)
            params = job_params(args, plan.if_already.value, behaviour.version, context)
            vm.queue_job(action=action, job_uuid=job_uuid, name=name.value, params=params,
                         cause=job_cause)
            return job_uuid

        job_uuid, vm, position, replayed = self.change(
            Vm, vm_uuid, decide, if_match=if_match, owner_uuid=owner_uuid,
            idempotency_key=idempotency,
            outcome=lambda job, vm: Accepted(str(vm.id), job, vm.version, None),
        )
        if replayed is not None:
            return replayed
        return Accepted(str(vm.id), job_uuid, vm.version, position)

    @staticmethod
    def _quarantine_instead(vm: Vm, stuck: str, cause: Cause) -> str:
        """A DELETE of a stuck VM quarantines it rather than racing the stuck job (design.md,
        lesson 3): the owner gets the usual accepted answer, and a destroy job that records,
        canceled, why it did not run."""
        job_uuid = str(uuidlib.uuid4())
        vm.queue_job(action=Action.DESTROY, job_uuid=job_uuid, name=JobName.DESTROY.value,
                     params={"args": {}, "if_already": "succeed"}, cause=cause)
        vm.cancel_queued(f"not run: the VM was {stuck}; it was quarantined for "
                         "troubleshooting instead", cause=cause)
        vm.record_quarantined(f"deleted by its owner while {stuck}", cause=cause)
        return job_uuid

    # -- facts observed on compute nodes ------------------------------------------------------

    def record_failure(self, vm_uuid: str, reason: str, message: str, *, cause: Cause) -> Accepted:
        """Record that a running VM stopped working (``reason``: ``evicted`` when its host took
        it away, ``crashed`` when its guest died); its desired state is left as it was, so a
        VM that should run is told apart (design.md). Raises ``VmNotFoundError`` and
        ``IllegalTransitionError`` (the VM is not running)."""
        _, vm, position, _ = self.change(
            Vm, vm_uuid, lambda vm: vm.record_failed(reason, message, cause=cause))
        return Accepted(str(vm.id), None, vm.version, position)
