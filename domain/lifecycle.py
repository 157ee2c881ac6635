"""The lifecycle commands of a VM: facts that compute nodes, jobs and operators establish.

Each checks the transition table (``domain/transitions.py``) before recording its event, so an
impossible transition is refused and never stored. A mixin of ``domain.vm.Vm``.
"""

from __future__ import annotations

from typing import Any

from domain import rules, transitions
from domain.errors import IllegalTransitionError, UpdatePendingError, ValidationError
from domain.events import Cause
from domain.job_queue import ActiveJob
from domain.json_input import cut
from domain.states import Action, Execution, JobName, VmState

# Why the quarantine ended a job (``JobCanceled.reason``, the job's ``error``).
CANCELED_BY_QUARANTINE = "canceled: the VM was quarantined"
CANCELED_WHILE_RUNNING = ("canceled: the VM was quarantined while the job ran; whatever the "
                          "job did after that is not recorded")
# Why a destroy with no job ended a job (``record_destroyed_without_job``).
CANCELED_BY_DESTROY = "canceled: the VM was destroyed"
CANCELED_BY_DESTROY_WHILE_RUNNING = ("canceled: the VM was destroyed while the job ran; "
                                     "whatever the job did after that is not recorded")
# Why a failed provision ended an ``add_nics`` queued behind it (``record_provision_failed``).
CANCELED_BY_PROVISION_FAILURE = ("canceled: the VM's provision failed, and the VM gave back "
                                 "every NIC, this job's too")


class Lifecycle:
    """Commands that record what happened to the VM."""

    # Provided by ``Vm``.
    state: Any
    version: int
    active_jobs: list[ActiveJob]  # domain/job_queue.py
    UPDATABLE_FIELDS: frozenset[str]
    Provisioned: Any
    ProvisionFailed: Any
    Started: Any
    Stopped: Any
    Rebooted: Any
    Failed: Any
    Destroyed: Any
    Quarantined: Any
    Released: Any
    MetadataUpdated: Any
    VolumeAddressesRefreshed: Any
    volumes: list[dict[str, str]]
    CapacityClaimed: Any
    CapacityReleased: Any
    trigger_event: Any
    end_active_jobs: Any
    owed_fence: Any
    queue_fence: Any
    cancel_queued: Any  # domain/job_queue.py
    give_back_nics: Any  # domain/vm_nics.py
    claim: dict[str, Any] | None
    quarantine: dict[str, Any] | None  # domain/vm_quarantine.py
    addresses_kept: bool  # domain/vm_nics.py
    nic_list: list[dict[str, Any]]
    ram: int
    cpu_cap: int | None
    has_server: bool
    may_hold_a_copy: Any  # domain/vm_placement.py

    def _check(self, event_name: str) -> None:
        transitions.after(VmState(self.state), event_name, has_server=self.has_server)

    @property
    def cpus(self) -> int:
        """CPUs the VM holds on its server: its ``cpu_cap`` (percent of one CPU, VMAPI)
        rounded up, at least 1."""
        return max(1, -(-(self.cpu_cap or 100) // 100))

    def claim_capacity(self, server_uuid: str, *, cause: Cause) -> bool:
        """Record that the VM holds its RAM and CPUs on ``server_uuid`` (the server's stream
        records the same claim in the same transaction). False (nothing recorded) if it
        already holds them there. Raises ``IllegalTransitionError`` on a destroyed VM and
        when it holds a claim on another server."""
        if VmState(self.state) is VmState.DESTROYED:
            raise IllegalTransitionError(self.state, "CapacityClaimed",
                                         has_server=self.has_server)
        if self.claim is not None:
            if self.claim["server_uuid"] == server_uuid:
                return False
            raise IllegalTransitionError(self.state, "CapacityClaimed (holds a claim on "
                                         f"{self.claim['server_uuid']})",
                                         has_server=self.has_server)
        self.trigger_event(self.CapacityClaimed, cause=cause, server_uuid=server_uuid,
                           ram_mib=self.ram, cpus=self.cpus)
        return True

    def release_capacity(self, *, cause: Cause) -> None:
        """Give back the capacity the log says the VM holds (nothing if it holds none)."""
        if self.claim is not None:
            self.trigger_event(self.CapacityReleased, cause=cause,
                               server_uuid=self.claim["server_uuid"])

    def record_provisioned(self, server_uuid: str, *, cause: Cause) -> None:
        """The VM now runs on ``server_uuid``. Raises ``IllegalTransitionError``."""
        self._check("Provisioned")
        self.trigger_event(self.Provisioned, cause=cause, server_uuid=server_uuid)

    def record_provision_failed(self, error: str, *, cause: Cause,
                                copy_may_be_on: list[str]) -> None:
        """Provisioning failed: the VM gives back the capacity it claimed.
        ``copy_may_be_on``: the servers a copy may still be on, which the job could not rule
        out (they did not answer, or the removal of the copy there failed); of those, only
        the servers the VM ever claimed are kept (``Placement.may_hold_a_copy``: a takeover
        asks the whole fleet, and a server the VM never claimed has no copy of it, answer or
        not), recorded with ``ProvisionFailed``, so the VM's destroy removes the copy there
        (``copy_servers``). Empty once so limited: every server a copy of it may be on
        answered that it has none (none was skipped for not answering, and any copy the job
        removed was removed); then it also gives back every NIC it holds (``Nics.give_back_nics``; the change loop releases their addresses in the
        same transaction), as VMAPI frees a failed provision's NICs (TRITON-394), so the
        addresses are free for the next VM and a later destroy has none left to release, and
        an ``add_nics`` queued behind the provision is canceled
        (``CANCELED_BY_PROVISION_FAILURE``): its NICs went with the others. Otherwise
        the VM keeps its NICs, and a queued ``add_nics`` stays: a copy on a node that did not
        answer (unreachable, removed, a removal that failed) may still be configured with
        those addresses and run again when its node comes back, so they are released only
        when its destroy has removed that copy (a reviewer's case: a takeover failing the
        provision while the copy's server was ``unknown``). Every way a provision fails comes
        here: its step's failure, a takeover that finds no copy or gives up
        (service/jobs/takeovers.py), each saying what the nodes answered. Raises
        ``IllegalTransitionError``."""
        self._check("ProvisionFailed")
        copy_may_be_on = self.may_hold_a_copy(copy_may_be_on)
        self.release_capacity(cause=cause)
        if not copy_may_be_on:
            self.give_back_nics(cause=cause)
            self.cancel_queued(CANCELED_BY_PROVISION_FAILURE, cause=cause,
                               name=JobName.ADD_NICS)
        self.trigger_event(self.ProvisionFailed, cause=cause, error=error,
                           copy_may_be_on=copy_may_be_on)

    def record_started(self, *, cause: Cause, server_uuid: str | None = None) -> None:
        """The VM runs again. Raises ``IllegalTransitionError``."""
        self._check("Started")
        self.trigger_event(self.Started, cause=cause, server_uuid=server_uuid)

    def record_stopped(self, *, cause: Cause) -> None:
        """The VM stopped. Raises ``IllegalTransitionError``."""
        self._check("Stopped")
        self.trigger_event(self.Stopped, cause=cause)

    def record_rebooted(self, *, cause: Cause) -> None:
        """The VM was rebooted. Raises ``IllegalTransitionError``."""
        self._check("Rebooted")
        self.trigger_event(self.Rebooted, cause=cause)

    def record_failed(self, reason: str, message: str, *, cause: Cause) -> None:
        """The VM failed; it gives back its capacity (design.md: failure releases).
        ``reason``: ``host_reboot`` when its host rebooted, ``crashed`` when its guest died, as
        its agent's reports tell (``service.commands.agents.record_happening``, through the
        API); ``evicted`` comes only from the trace replay, whose task was evicted
        (service/replay/replayer.py). Raises ``IllegalTransitionError``."""
        self._check("Failed")
        self.release_capacity(cause=cause)
        self.trigger_event(self.Failed, cause=cause, reason=reason, message=message)

    def record_destroyed(self, *, cause: Cause, keep_addresses: bool = False) -> None:
        """The VM is gone; it gives back its capacity, and the change loop releases its NICs'
        addresses in the same transaction, unless ``keep_addresses`` (and it has NICs): then
        its ``fence`` job releases them once it has fenced every server a copy may be on
        (``Nics.release_kept_addresses``). Raises ``IllegalTransitionError``."""
        self._check("Destroyed")
        self.release_capacity(cause=cause)
        self.trigger_event(self.Destroyed, cause=cause,
                           addresses_kept=keep_addresses and bool(self.nic_list))

    def record_destroyed_without_job(self, *, cause: Cause) -> None:
        """The VM is gone, recorded at once rather than by a destroy job (a version 2
        DeleteVm of a VM whose server was removed: no node is left to ask). Ends its active
        jobs first, the queued ones and the running one, in the same save (``end_active_jobs``),
        so a worker still at work records nothing after ``Destroyed``. The servers being
        removed refuse that worker's calls only where their node reports them gone, so a job
        that ran is fenced off as a quarantine's is (``record_quarantined``): a ``fence`` job
        is queued after ``Destroyed``. Until it has fenced every server a copy may be on, the
        worker's late call (an ``add_nics``, a boot) could still configure a copy there with
        the VM's addresses, so ``Destroyed`` keeps them (``addresses_kept``) and the fence job
        releases them (``Nics.release_kept_addresses``): no address is given to another VM
        while a copy of this one may get it. With no fence owed, no worker can still call, and
        ``Destroyed`` releases them at once. Raises ``IllegalTransitionError``."""
        self._check("Destroyed")
        owed = self.owed_fence()
        self.end_active_jobs(CANCELED_BY_DESTROY, CANCELED_BY_DESTROY_WHILE_RUNNING, cause=cause)
        self.record_destroyed(cause=cause, keep_addresses=owed is not None)
        if owed is not None:
            self.queue_fence({**owed, "macs": []}, cause=cause)

    def record_quarantined(self, reason: str, *, cause: Cause) -> None:
        """Take the VM into the operator quarantine, ending its active jobs first (one
        ``JobCanceled`` each, in the same save: ``end_active_jobs``): the queued ones, and the
        running one, whose worker then records nothing more, so none of them changes the VM
        after its ``Quarantined`` (a stuck job must not block the operator, nor act on a VM
        taken for troubleshooting; docs/api.md). Every writer that quarantines comes here: the
        operator's action, the stuck check, a DELETE of a stuck VM, an agent that forgot the
        VM. The running job's worker may still be in a compute call, so the same save queues a
        ``fence`` job after ``Quarantined`` (``owed_fence``, ``queue_fence``): it raises the
        VM's fence on its nodes above the canceled job's claim, then gives back a canceled
        ``add_nics``'s NICs. Raises ``IllegalTransitionError``."""
        self._check("Quarantined")
        owed = self.owed_fence()
        self.end_active_jobs(CANCELED_BY_QUARANTINE, CANCELED_WHILE_RUNNING, cause=cause)
        self.trigger_event(self.Quarantined, cause=cause, reason=reason)
        if owed is not None:
            self.queue_fence(owed, cause=cause)

    def record_released(self, *, cause: Cause) -> None:
        """Give a quarantined VM back. Raises ``IllegalTransitionError``."""
        if VmState(self.state) is not VmState.QUARANTINED:
            raise IllegalTransitionError(self.state, "Released", has_server=self.has_server)
        self.trigger_event(self.Released, cause=cause)

    def record_adopted_while_quarantined(self, event_name: str, *, cause: Cause,
                                         server_uuid: str | None = None) -> None:
        """Record ``event_name`` (``Started``, ``Stopped`` or ``Rebooted``) for a quarantined
        VM: what the job the quarantine canceled did on the node, adopted by its ``fence`` job
        (service/jobs/fence_settle.py; docs/jobs.md, "A quarantine while a job runs"). The VM
        stays quarantined; ``Released`` then gives it back in the state the event leads to
        (``transitions.while_quarantined``); a ``Started`` names ``server_uuid`` when the
        canceled start placed the VM anew. Raises ``IllegalTransitionError`` when the VM is
        not quarantined, or the event does not follow the state it is to be given back in."""
        if VmState(self.state) is not VmState.QUARANTINED:
            raise IllegalTransitionError(self.state, event_name, has_server=self.has_server)
        transitions.while_quarantined(VmState(self.quarantine["previous_state"]), event_name,
                                      has_server=self.has_server)
        if event_name == "Started":
            self.trigger_event(self.Started, cause=cause, server_uuid=server_uuid)
        else:
            self.trigger_event(getattr(self, event_name), cause=cause)

    def update_metadata(self, changes: dict[str, Any], *, cause: Cause) -> bool:
        """Apply ``changes`` to alias, metadata or tags; return False (and record nothing)
        when nothing would change. Raises ``IllegalTransitionError`` on a destroyed or a
        quarantined VM (the rules table refuses ``update`` in both) and ``ValidationError``
        for a field that cannot be updated."""
        if rules.refused(VmState(self.state), Action.UPDATE):
            raise IllegalTransitionError(self.state, "MetadataUpdated",
                                         has_server=self.has_server)
        unknown = sorted(set(changes) - self.UPDATABLE_FIELDS)
        if unknown:
            # A domain refusal, not a ValueError: the worker fails the job with it instead
            # of crashing its pass and retrying the job at every lease expiry.
            refusal = ValidationError(unknown[0], "Invalid", "cannot be updated")
            refusal.errors += [
                {"field": f, "code": "Invalid", "message": "cannot be updated"} for f in unknown[1:]
            ]
            raise refusal
        effective = {k: v for k, v in changes.items() if getattr(self, k) != v}
        if not effective:
            return False
        self.trigger_event(self.MetadataUpdated, cause=cause, changes=effective)
        return True

    def require_updates_applied(self) -> None:
        """Refuse an update made on what the client read of this version (it sent the
        version in ``If-Match``) while an update job is queued or running: the version
        moved when that job was queued, but its alias, metadata and tags change only when
        it succeeds (``update_metadata``), so they do not show it yet, and an update, which
        replaces each object it names whole, would wipe its changes unseen (a tester lost
        30 of 32 tag keys so). Raises ``UpdatePendingError`` naming the first such job; the
        client waits for it and reads again. A request without a version claims nothing it
        read, and is not refused (the last writer wins; docs/api.md)."""
        pending = next((job for job in self.active_jobs if job["name"] == JobName.UPDATE),
                       None)
        if pending is not None:
            raise UpdatePendingError(self.version, pending["uuid"],
                                     Execution(pending["execution"]).value)

    def record_volume_addresses(self, addresses: dict[str, str | None], *, cause: Cause) -> bool:
        """Record the addresses (``{volume_uuid: address or None}``) of the mounted volumes the
        VM booted with (design.md lesson 6); False (nothing recorded) when it mounts none.
        Raises ``ValidationError`` naming a volume it does not mount."""
        mounted = {mount["volume_uuid"] for mount in self.volumes}
        if not mounted:
            return False
        unknown = sorted(set(addresses) - mounted)
        if unknown:
            raise ValidationError("volumes", "Invalid", f"the VM does not mount {cut(unknown[0])}")
        self.trigger_event(self.VolumeAddressesRefreshed, cause=cause, addresses=dict(addresses))
        return True
