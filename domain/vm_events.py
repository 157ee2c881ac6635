"""The ``Vm`` aggregate's base event, its job-queue events (``domain.job_queue`` triggers
them) and the events that change no lifecycle state (capacity claims, metadata, volume
addresses); ``domain.vm.Vm`` names each, e.g. ``Vm.JobQueued``. Defined apart from the aggregate's other
events only to keep modules small; their topics (``TOPIC``), which the stored events
carry, do not depend on where they are defined.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from domain.events import DomainEvent
from domain.job_queue import ActiveJob
from domain.states import JOB_DESIRES, Execution
from domain.stuck import starts_anew

if TYPE_CHECKING:
    # The queue these events change (a mixin of ``domain.vm.Vm``, which imports this module).
    from domain.job_queue import JobQueue as Vm

class VmEvent(DomainEvent):
    """Base of every VM event (its cause and chain link are ``DomainEvent``'s)."""

    TOPIC = "vm.event"

    def mutate(self, aggregate: Any) -> Any:
        """The VM with this event applied; an event that changes its state (its creation, or
        a transition that ``domain.stuck.starts_anew``) sets ``state_since`` to its
        timestamp, from which the stuck check times a transient state."""
        before = getattr(aggregate, "state", None)
        vm = super().mutate(aggregate)
        if before is None or starts_anew(before, vm.state):
            vm.state_since = self.timestamp
        return vm


class JobQueued(VmEvent):
    """A job was queued for the VM (behind any active job)."""

    TOPIC = "vm.job_queued"
    job_uuid: str
    name: str
    params: dict[str, Any]

    def apply(self, vm: Vm) -> None:
        vm.active_jobs.append(ActiveJob(
            uuid=self.job_uuid, name=self.name, params=self.params,
            execution=Execution.QUEUED.value, attempt=0, worker=None, lease_expires_at=None,
            steps_done=[]))
        desired = JOB_DESIRES.get(self.name)
        if desired is not None:
            vm.desired_state = desired


class JobStarted(VmEvent):
    """A worker claimed the head job (or took it over after its lease expired)."""

    TOPIC = "vm.job_started"
    job_uuid: str
    worker: str
    attempt: int
    lease_expires_at: datetime

    def apply(self, vm: Vm) -> None:
        job = vm.active_jobs[0]
        job["execution"] = Execution.RUNNING.value
        job["attempt"] = self.attempt
        job["worker"] = self.worker
        job["lease_expires_at"] = self.lease_expires_at.isoformat()
        job.setdefault("started_at", self.timestamp.isoformat())  # the first start
        # whether the attempt before ended in a deliberate wait (its last step one), not
        # with its worker lost: a re-take after a wait is no lost worker's takeover
        job["after_a_wait"] = job.pop("waiting", False)


class JobLeaseRenewed(VmEvent):
    """The worker running the head job still works on it: its lease is extended."""

    TOPIC = "vm.job_lease_renewed"
    job_uuid: str
    lease_expires_at: datetime

    def apply(self, vm: Vm) -> None:
        vm.active_jobs[0]["lease_expires_at"] = self.lease_expires_at.isoformat()


class JobStepRecorded(VmEvent):
    """A step of the running job ended (a ``chain_results`` entry)."""

    TOPIC = "vm.job_step_recorded"
    job_uuid: str
    step: dict[str, Any]

    def apply(self, vm: Vm) -> None:
        # What a takeover needs to know: which steps an earlier attempt finished.
        job = vm.active_job(self.job_uuid)
        if job is not None and self.step.get("error") is None:
            job.setdefault("steps_done", []).append(self.step["name"])
        if job is not None:
            # a takeover that waits for a server ends its attempt with this step
            # (service/jobs/takeovers.py, ``_wait_for``): counted apart from lost workers
            result = self.step.get("result")
            job["waiting"] = isinstance(result, dict) and "waiting_for" in result
            job["waits"] = job.get("waits", 0) + int(job["waiting"])
            # what a step whose answer was lost did stays unknown from the wait to ask the
            # node until a ``reconcile`` step that is no wait (the node answered, or the job
            # decided without it), whatever attempts come between, lost workers' too
            if job["waiting"]:
                job["outcome_unknown"] = True
            elif self.step["name"] == "reconcile" and self.step.get("error") is None:
                job["outcome_unknown"] = False


class JobSucceeded(VmEvent):
    """The head job ended well; it leaves the queue."""

    TOPIC = "vm.job_succeeded"
    job_uuid: str

    def apply(self, vm: Vm) -> None:
        vm._drop_job(self.job_uuid)


class JobFailed(VmEvent):
    """The head job ended in failure; it leaves the queue."""

    TOPIC = "vm.job_failed"
    job_uuid: str
    error: str

    def apply(self, vm: Vm) -> None:
        vm._drop_job(self.job_uuid)


class JobCanceled(VmEvent):
    """A job was canceled before it started, or, by a quarantine, while it ran; it leaves
    the queue."""

    TOPIC = "vm.job_canceled"
    job_uuid: str
    reason: str

    def apply(self, vm: Vm) -> None:
        vm._drop_job(self.job_uuid)


class MetadataUpdated(VmEvent):
    """Alias, metadata or tags changed (``changes`` holds the new values)."""

    TOPIC = "vm.metadata_updated"
    changes: dict[str, Any]

    def apply(self, vm: Vm) -> None:
        for field, value in self.changes.items():
            setattr(vm, field, value)


class VolumeAddressesRefreshed(VmEvent):
    """The VM booted with these addresses of the volumes it mounts (``{volume_uuid:
    address or None}``, design.md lesson 6). Changes no state."""

    TOPIC = "vm.volume_addresses_refreshed"
    addresses: dict[str, str | None]

    def apply(self, vm: Vm) -> None:
        """Nothing: ``projections/volume_mounts.py`` reads the addresses."""


class CapacityClaimed(VmEvent):
    """The VM was placed on a server and holds capacity there (recorded in the same
    transaction as the server's ``Claimed``)."""

    TOPIC = "vm.capacity_claimed"
    server_uuid: str
    ram_mib: int
    cpus: int

    def apply(self, vm: Vm) -> None:
        vm.claim = {"server_uuid": self.server_uuid, "ram_mib": self.ram_mib,
                    "cpus": self.cpus}
        if self.server_uuid not in vm.claimed_servers:
            vm.claimed_servers.append(self.server_uuid)


class CapacityReleased(VmEvent):
    """The VM gave its capacity back (with the server's ``ClaimReleased``)."""

    TOPIC = "vm.capacity_released"
    server_uuid: str

    def apply(self, vm: Vm) -> None:
        vm.claim = None
