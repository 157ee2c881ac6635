"""The ``Vm`` aggregate: one VM's lifecycle and its job queue, in one stream.

Commands are public methods: they check the transition table or the job-queue rules and raise a
``domain.errors`` refusal, then trigger an event. Events only mutate (``apply`` runs again on
every replay, so it never checks or refuses). Every event carries its cause (actor, request id,
idempotency key, API version, job uuid) in ``cause``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain import (
    chain, desire, policy, vm_events, vm_lifecycle_events, vm_nics, vm_placement,
    vm_quarantine, vm_reports,
)
from domain.errors import ValidationError
from domain.events import Cause, make_cause
from domain.job_queue import ActiveJob, JobQueue
from domain.lifecycle import Lifecycle
from domain.states import DesiredState, JobName, VmState
from domain.vm_quarantine import QUARANTINE_OWNER_UUID

# Cause and make_cause are defined in domain.events, QUARANTINE_OWNER_UUID in
# domain.vm_quarantine; imported from here too.
__all__ = ["QUARANTINE_OWNER_UUID", "Cause", "Vm", "make_cause"]


class Vm(chain.Chained, JobQueue, Lifecycle, vm_placement.Placement, vm_reports.Reports,
         vm_nics.Nics, desire.Desires, Aggregate):
    """A VM: its spec, its state and desired state, and its queue of active jobs.

    ``active_jobs`` holds the queued and running jobs, head first; only the head may run (the
    ticket). Finished jobs leave the queue; their history is in the stream (and ``job_view``).
    """

    TOPIC = "vm"

    # Version 2 keeps ``state_since`` and ``lost_copy``; a snapshot version 1 took lacks them.
    # Version 3 keeps ``node_seen`` (domain/vm_reports.py); version 4 ``addresses_kept``;
    # version 5 ``copy_may_be_on``, version 6 ``claimed_servers`` (domain/vm_placement.py).
    class_version = 6

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """A snapshot taken before VMs kept ``state_since`` does not say when the VM entered
        its state: None, which ``stuck.in_state_since`` reads as the VM's creation; nor
        ``lost_copy``: None, no copy a host reboot took is known (a snapshot taken with them
        but before this version was numbered keeps its own)."""
        state.setdefault("state_since", None)
        state.setdefault("lost_copy", None)

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        """A snapshot taken before job steps recorded the node's sequence number knows none."""
        state.setdefault("node_seen", None)

    @staticmethod
    def upcast_v3_v4(state: dict[str, Any]) -> None:
        """A snapshot taken before a destroyed VM could keep its addresses kept none."""
        state.setdefault("addresses_kept", False)

    @staticmethod
    def upcast_v4_v5(state: dict[str, Any]) -> None:
        """A snapshot taken before failed provisions kept their servers names none."""
        state.setdefault("copy_may_be_on", [])

    @staticmethod
    def upcast_v5_v6(state: dict[str, Any]) -> None:
        """A snapshot taken before VMs kept the servers they claimed does not know them: every
        server it names is counted (its server, its claim's, those its failed provision
        named), so no server a copy may be on is left out. It is a guess (a failed provision
        gave its claim back, and is read as having claimed none), so nothing folds on from it:
        a load does not use such a snapshot (service/commands/snapshot_seal.py), the runner
        folds a ``vm_view`` row this old afresh from the log (projections/vm_view_folds.py)
        and the audit does not compare what an upcast supplies (domain/folding.py
        ``said_fields``)."""
        named = [state.get("server_uuid"), (state.get("claim") or {}).get("server_uuid"),
                 *state.get("copy_may_be_on", [])]
        state.setdefault("claimed_servers",
                         list(dict.fromkeys(server for server in named if server)))

    Event = vm_events.VmEvent

    class Created(Event, Aggregate.Created):
        """A VM was asked for; it is provisioning."""

        TOPIC = "vm.created"
        owner_uuid: str
        alias: str | None
        brand: str
        ram: int
        cpu_cap: int | None
        image_uuid: str | None
        persistence: str | dict[str, str]  # a preset, or rows set one by one (domain/policy.py)
        customer_metadata: dict[str, Any]
        internal_metadata: dict[str, Any]
        tags: dict[str, Any]
        volumes: list[dict[str, str]]

        # Version 2 added ``volumes`` (the volumes the VM mounts, design.md lesson 6).
        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """A VM created before volumes existed mounts none."""
            state["volumes"] = []

        def apply(self, vm: Vm) -> None:
            vm.owner_uuid = self.owner_uuid
            vm.alias = self.alias
            vm.brand = self.brand
            vm.ram = self.ram
            vm.cpu_cap = self.cpu_cap
            vm.image_uuid = self.image_uuid
            vm.persistence = self.persistence
            vm.customer_metadata = dict(self.customer_metadata)
            vm.internal_metadata = dict(self.internal_metadata)
            vm.tags = dict(self.tags)
            vm.volumes = [dict(v) for v in self.volumes]
            vm.server_uuid = None
            vm.state = VmState.PROVISIONING
            vm.desired_state = DesiredState.RUNNING
            vm.error = None
            vm.quarantine = None
            vm.destroyed_at = None
            vm.active_jobs = []
            vm.claim = None
            vm.reported_at = None
            vm.lost_copy = None
            vm.node_seen = None
            vm.nics = []
            vm.addresses_kept = False
            vm.copy_may_be_on = []
            vm.claimed_servers = []

    class Discovered(Created):
        """An agent found a VM the log did not have (``domain/vm_reports.py``): recorded as
        found, in its state, on its server (or none), with no job."""

        TOPIC = "vm.discovered"
        state: str
        server_uuid: str | None
        reported_at: datetime | None

        def apply(self, vm: Vm) -> None:
            super().apply(vm)
            vm_reports.found(vm, self.state, self.server_uuid, self.reported_at)

    AgentReported = vm_reports.AgentReported
    CopyLost = vm_reports.CopyLost
    CopyFound = vm_reports.CopyFound
    NodeObserved = vm_reports.NodeObserved
    NicsAdded = vm_nics.NicsAdded
    NicsRemoved = vm_nics.NicsRemoved
    AddressesReleased = vm_nics.AddressesReleased
    JobQueued = vm_events.JobQueued
    JobStarted = vm_events.JobStarted
    JobLeaseRenewed = vm_events.JobLeaseRenewed
    JobStepRecorded = vm_events.JobStepRecorded
    JobSucceeded = vm_events.JobSucceeded
    JobFailed = vm_events.JobFailed
    JobCanceled = vm_events.JobCanceled
    DesiredStateSet = desire.DesiredStateSet

    Provisioned = vm_lifecycle_events.Provisioned
    ProvisionFailed = vm_lifecycle_events.ProvisionFailed
    Started = vm_lifecycle_events.Started
    Stopped = vm_lifecycle_events.Stopped
    Rebooted = vm_lifecycle_events.Rebooted
    Failed = vm_lifecycle_events.Failed
    Destroyed = vm_lifecycle_events.Destroyed
    Quarantined = vm_quarantine.Quarantined
    Released = vm_quarantine.Released
    CapacityClaimed = vm_events.CapacityClaimed
    CapacityReleased = vm_events.CapacityReleased
    MetadataUpdated = vm_events.MetadataUpdated
    VolumeAddressesRefreshed = vm_events.VolumeAddressesRefreshed

    # Attributes set by Created.apply; declared for readers and type checkers.
    owner_uuid: str
    alias: str | None
    brand: str
    ram: int
    cpu_cap: int | None
    image_uuid: str | None
    persistence: str
    customer_metadata: dict[str, Any]
    internal_metadata: dict[str, Any]
    tags: dict[str, Any]
    volumes: list[dict[str, str]]
    server_uuid: str | None
    state: VmState
    desired_state: DesiredState
    error: dict[str, str] | None
    quarantine: dict[str, Any] | None
    destroyed_at: datetime | None
    active_jobs: list[ActiveJob]
    claim: dict[str, Any] | None
    reported_at: datetime | None  # the newest generation-less agent report applied
    state_since: datetime | None  # when it entered its state (VmEvent.mutate); None: unknown
    nics: list[dict[str, Any]]  # domain/vm_nics.py
    addresses_kept: bool  # destroyed, its addresses left to its fence job (vm_nics.py)
    copy_may_be_on: list[str]  # its provision failed, a copy maybe left (vm_placement.py)
    claimed_servers: list[str]  # every server it held a claim on (vm_placement.py)
    chain_head: str

    UPDATABLE_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"alias", "customer_metadata", "internal_metadata", "tags"}
    )

    def __init__(self) -> None:
        """State is set by ``Created.apply``; create VMs with ``Vm.create``."""

    # -- creation ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        *,
        vm_uuid: UUID,
        owner_uuid: str,
        brand: str,
        ram: int,
        provision_job_uuid: str,
        cause: Cause,
        alias: str | None = None,
        cpu_cap: int | None = None,
        image_uuid: str | None = None,
        persistence: str | dict[str, str] = "persistent",
        customer_metadata: dict[str, Any] | None = None,
        internal_metadata: dict[str, Any] | None = None,
        tags: dict[str, Any] | None = None,
        volumes: list[dict[str, str]] | None = None,
        provision_params: dict[str, Any] | None = None,
    ) -> Vm:
        """Record a new VM in ``provisioning`` with its provision job queued (two events).
        Raises ``ValidationError`` (field ``persistence``) for a policy ``domain.policy``
        does not take (an unknown preset, happening or response, or a row it does not carry
        out)."""
        try:
            persistence = policy.validate(persistence)
        except ValueError as bad:
            raise ValidationError("persistence", "Invalid", str(bad)) from None
        vm = cls._create(
            cls.Created,
            id=vm_uuid,
            cause=cause,
            owner_uuid=owner_uuid,
            alias=alias,
            brand=brand,
            ram=ram,
            cpu_cap=cpu_cap,
            image_uuid=image_uuid,
            persistence=persistence,
            customer_metadata=customer_metadata or {},
            internal_metadata=internal_metadata or {},
            tags=tags or {},
            volumes=volumes or [],
        )
        vm.trigger_event(
            cls.JobQueued,
            cause=cause,
            job_uuid=provision_job_uuid,
            name=JobName.PROVISION.value,
            params=provision_params or {},
        )
        return vm


# The topics of a VM stream's first event: ``Created`` through the API, ``Discovered`` for a
# VM its agent found. Whatever finds VMs by their first event (the fleet's audit pages, the
# replay's check for an empty database) reads both: one alone missed the found VMs.
FIRST_TOPICS = (Vm.Created.TOPIC, Vm.Discovered.TOPIC)
#: The same events by their class names, as histories and the console show them.
FIRST_EVENT_TYPES = (Vm.Created.__name__, Vm.Discovered.__name__)
