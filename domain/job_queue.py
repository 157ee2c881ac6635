"""The job queue of a VM, kept in the VM's own stream (design.md, "Jobs live in the VM's
stream"): the commands that queue, claim, advance and end jobs. Only the head of the queue may
run (the ticket); a worker claims it by appending ``JobStarted`` at the version it read.

A mixin of ``domain.vm.Vm``, whose events (``JobQueued``, ``JobStarted``, ...) it triggers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict
from uuid import UUID, uuid5

from domain import rules
from domain.errors import JobNotRunnableError
from domain.events import Cause
from domain.states import Action, Execution, JobName, VmState

# A fence job's uuid is named after the job whose fence it raises: one per canceled job, the
# same in every fold.
_FENCE_JOBS = uuid5(UUID(int=0), "vmledger:fence-job")

# Why a version 2 DeleteVm ended a queued provision, and the jobs queued behind it
# (``JobQueue.cancel_queued_provision``; docs/api.md, "Contract: DeleteVm and actions").
CANCELED_BY_DELETE_VM = "canceled by a DeleteVm"


def job_params(args: dict[str, Any], if_already: str, api_version: int,
               context: dict[str, Any] | None) -> dict[str, Any]:
    """The ``params`` an action's or NIC change's job records: ``{args, if_already,
    api_version}``, and ``context`` when the request gave one (api.md, "Jobs"). A repeat
    merges into the last job only when it would record these very params
    (``JobQueue.matching_active_job``)."""
    params = {"args": args, "if_already": if_already, "api_version": api_version}
    if context is not None:
        params["context"] = context
    return params


class ActiveJob(TypedDict, total=False):
    """A queued or running job as ``Vm.active_jobs`` holds it (a plain dict, so snapshots
    store it as they always did). ``execution`` is ``Execution.QUEUED`` or
    ``Execution.RUNNING``; ``attempt``, ``worker`` and ``lease_expires_at`` (ISO 8601) are set
    when a worker claims it; ``steps_done`` names the steps an attempt finished; ``waits``
    counts the attempts that ended waiting for a server (a provision's takeover,
    docs/jobs.md, "Takeovers"), ``waiting`` whether the last step was such a wait, and
    ``after_a_wait`` whether the attempt claimed last followed one, and ``outcome_unknown``
    whether what a step whose answer was lost did is still unknown (set by such a wait,
    cleared by a ``reconcile`` step that is no wait: ``JobStepRecorded``; a snapshot taken
    before it was kept lacks it, and ``after_a_wait`` stands for it)."""

    uuid: str
    name: str
    params: dict[str, Any]
    execution: str  # an Execution value
    attempt: int
    worker: str | None
    lease_expires_at: str | None
    steps_done: list[str]
    started_at: str
    waits: int
    waiting: bool
    after_a_wait: bool
    outcome_unknown: bool


class JobQueue:
    """Commands on the VM's queue of active jobs (``active_jobs``, head first)."""

    # Provided by ``Vm``.
    active_jobs: list[ActiveJob]
    state: Any
    has_server: bool
    desired_state: Any
    JobQueued: Any
    JobStarted: Any
    JobLeaseRenewed: Any
    JobStepRecorded: Any
    JobSucceeded: Any
    JobFailed: Any
    JobCanceled: Any
    trigger_event: Any
    give_back_added_nics: Any  # domain/vm_nics.py
    withdraw_ask: Any  # domain/desire.py
    desire_after_ending: Any
    copy_servers: list[str]  # domain/vm_placement.py

    @property
    def head_job(self) -> ActiveJob | None:
        """The job holding the ticket (the only one that may run), or None."""
        return self.active_jobs[0] if self.active_jobs else None

    @property
    def active_destroy(self) -> ActiveJob | None:
        """The first destroy job queued or running, or None. A job queued now gets the ticket
        only after it (the queue runs in order), on a VM it has destroyed unless it fails
        (``rules.fails_behind_destroy``)."""
        return next((j for j in self.active_jobs if j["name"] == JobName.DESTROY), None)

    def active_job(self, job_uuid: str) -> ActiveJob | None:
        """The queued or running job with this uuid, or None."""
        return next((j for j in self.active_jobs if j["uuid"] == job_uuid), None)

    def matching_active_job(self, name: str, params: dict[str, Any]) -> ActiveJob | None:
        """The job a repeat of ``name`` that would record ``params`` merges into, or None
        (queue a new one).

        Only a job recording exactly the repeat's ``params`` can take it: the same ``args``
        and ``if_already`` (a v1 stop that fails on a stopped VM cannot answer a v2 or
        idempotent stop, which succeeds doing nothing), and the same ``api_version`` and
        ``context``: a job's params are what the log keeps of the request, and a request
        merged into a job recording another caller's context would be recorded nowhere (a
        tester). And only the last job of the queue (queued, or running with nothing queued
        after it): a repeat merged into an earlier job would run before the jobs queued
        after it, so ``stop``, ``start``, ``stop`` would end running although the last
        command acknowledged was a stop (the last acknowledged intent wins; api.md)."""
        last = self.active_jobs[-1] if self.active_jobs else None
        if last is not None and last["name"] == name and last["params"] == params:
            return last
        return None

    def queue_job(
        self, *, action: Action, job_uuid: str, name: str, params: dict[str, Any], cause: Cause
    ) -> None:
        """Queue a job for ``action`` behind the active ones.

        Raises ``InvalidTransitionError`` when the rules table refuses the action in this state.
        """
        rules.require(VmState(self.state), action, has_server=self.has_server)
        self.trigger_event(self.JobQueued, cause=cause, job_uuid=job_uuid, name=name, params=params)

    def queue_provision(self, *, job_uuid: str, params: dict[str, Any], cause: Cause) -> bool:
        """Queue a provision for a VM in ``provisioning`` that has none (one given back from
        the quarantine after its provision was canceled). False (nothing recorded) if it is
        not provisioning or a provision is already queued or running."""
        if VmState(self.state) is not VmState.PROVISIONING or any(
                job["name"] == JobName.PROVISION for job in self.active_jobs):
            return False
        self.trigger_event(self.JobQueued, cause=cause, job_uuid=job_uuid,
                           name=JobName.PROVISION.value, params=params)
        return True

    def start_job(
        self, job_uuid: str, *, worker: str, now: datetime, lease_expires_at: datetime,
        cause: Cause,
    ) -> None:
        """Claim the head job for ``worker`` until ``lease_expires_at`` (the ticket).

        A queued head job is claimed at attempt 1; a running one whose lease expired before
        ``now`` is taken over at the next attempt. Raises ``JobNotRunnableError`` otherwise.
        """
        head = self.head_job
        if head is None or head["uuid"] != job_uuid:
            raise JobNotRunnableError(job_uuid, "not the head of the VM's job queue")
        if head["execution"] == Execution.RUNNING.value:
            expires = datetime.fromisoformat(head["lease_expires_at"])
            if expires > now:
                raise JobNotRunnableError(job_uuid, f"leased by {head['worker']}")
        self.trigger_event(
            self.JobStarted,
            cause=cause,
            job_uuid=job_uuid,
            worker=worker,
            attempt=head["attempt"] + 1,
            lease_expires_at=lease_expires_at,
        )

    def renew_lease(
        self, job_uuid: str, *, worker: str, lease_expires_at: datetime, cause: Cause
    ) -> None:
        """Extend ``worker``'s lease on the running head job. Raises ``JobNotRunnableError``
        if the job ended or another worker took it over."""
        self.require_held(job_uuid, worker)
        self.trigger_event(
            self.JobLeaseRenewed, cause=cause, job_uuid=job_uuid, lease_expires_at=lease_expires_at
        )

    def require_held(self, job_uuid: str, worker: str | None = None) -> ActiveJob:
        """The running head job ``job_uuid`` (held by ``worker``, when given). Raises
        ``JobNotRunnableError`` if it is not the running head job (it ended: canceled, say by
        a quarantine, or taken over and ended) or another worker took it over."""
        head = self.head_job
        if head is None or head["uuid"] != job_uuid or head["execution"] != Execution.RUNNING:
            raise JobNotRunnableError(job_uuid, "not the running head job (it ended, canceled "
                                      "by a quarantine or taken over and ended)")
        if worker is not None and head["worker"] != worker:
            raise JobNotRunnableError(job_uuid, f"taken over by {head['worker']}")
        return head

    def record_step(
        self, job_uuid: str, step: dict[str, Any], *, cause: Cause, worker: str | None = None
    ) -> None:
        """Record a finished step of the running job (``{name, result, error, started_at,
        finished_at}``). Raises ``JobNotRunnableError`` if ``worker`` no longer holds it."""
        self.require_held(job_uuid, worker)
        self.trigger_event(self.JobStepRecorded, cause=cause, job_uuid=job_uuid, step=step)

    def succeed_job(self, job_uuid: str, *, cause: Cause, worker: str | None = None) -> None:
        """End the running head job well. Raises ``JobNotRunnableError`` if not held."""
        self.require_held(job_uuid, worker)
        self.trigger_event(self.JobSucceeded, cause=cause, job_uuid=job_uuid)

    def fail_job(
        self, job_uuid: str, error: str, *, cause: Cause, worker: str | None = None
    ) -> None:
        """End the running head job in failure; a job that asked for a state has its ask
        withdrawn (``Desires.desire_after_ending``). Raises ``JobNotRunnableError`` if not held."""
        job = self.require_held(job_uuid, worker)
        desired = self.desire_after_ending(job_uuid)
        self.trigger_event(self.JobFailed, cause=cause, job_uuid=job_uuid, error=error)
        self.withdraw_ask(desired, job, "failed", cause=cause)

    def cancel_job(self, job_uuid: str, reason: str, *, cause: Cause) -> None:
        """Cancel a job that has not started; an ``add_nics`` gives back the NICs it recorded
        when asked for, in the same save (``Nics.give_back_added_nics``: no node got them).
        Every cancel of a queued job comes here (``cancel_queued``: a quarantine, a DeleteVm).
        Raises ``JobNotRunnableError`` otherwise (a running job is canceled only by
        ``end_active_jobs``: ``cancel_running``)."""
        job = self.active_job(job_uuid)
        if job is None or job["execution"] != Execution.QUEUED.value:
            raise JobNotRunnableError(job_uuid, "only a queued job can be canceled")
        self.give_back_added_nics(job, cause=cause)
        desired = self.desire_after_ending(job_uuid)
        self.trigger_event(self.JobCanceled, cause=cause, job_uuid=job_uuid, reason=reason)
        self.withdraw_ask(desired, job, "was canceled", cause=cause)

    def cancel_running(self, reason: str, *, cause: Cause) -> str | None:
        """Cancel the job running now (the head, if a worker claimed it), wherever its worker
        is; returns its uuid, or None when no job runs. Its worker can record nothing more
        for it: each of its saves checks the ticket first (``JobNotRunnableError``). Only
        ``end_active_jobs`` does this: a job that no longer holds the ticket must not change a
        VM taken from its owner, or gone. A running ``add_nics`` keeps
        the NICs it recorded: its worker's call may still reach the node, until the ``fence``
        job queued in the same save has raised the VM's fence above it (``owed_fence``)."""
        head = self.head_job
        if head is None or head["execution"] != Execution.RUNNING.value:
            return None
        desired = self.desire_after_ending(head["uuid"])
        self.trigger_event(self.JobCanceled, cause=cause, job_uuid=head["uuid"], reason=reason)
        self.withdraw_ask(desired, head, "was canceled", cause=cause)
        return head["uuid"]

    def cancel_queued(self, reason: str, *, cause: Cause, name: JobName | None = None
                      ) -> list[str]:
        """Cancel every job that has not started (only those named ``name``, if given), in
        queue order; a running job is left to its worker. Returns the canceled jobs' uuids."""
        canceled = [job["uuid"] for job in self.active_jobs
                    if job["execution"] == Execution.QUEUED.value
                    and (name is None or job["name"] == name)]
        for job_uuid in canceled:
            self.cancel_job(job_uuid, reason, cause=cause)
        return canceled

    def cancel_queued_provision(self, reason: str, *, cause: Cause) -> list[str]:
        """Cancel the provision if it has not started, and with it every job queued behind
        it but a ``fence`` job, in queue order; returns their uuids (none when no provision
        is queued). A version 2 DeleteVm of a VM still provisioning does this, in the save
        that queues its destroy: the destroy then marks the VM destroyed, never placed, so a
        start, stop, reboot or update queued behind the provision could only fail at its
        turn ("Cannot stop a VM in state 'provisioning'", the operator tester's case) or
        change a VM about to be destroyed; an ``add_nics`` gives its NICs back
        (``cancel_job``). A fence job is kept: its fence is owed to a job canceled earlier
        ("A quarantine while a job runs" in docs/jobs.md), and no cancel may lose it."""
        queued = [job for job in self.active_jobs if job["execution"] == Execution.QUEUED.value]
        at = next((n for n, job in enumerate(queued) if job["name"] == JobName.PROVISION), None)
        if at is None:
            return []
        canceled = [job["uuid"] for job in queued[at:] if job["name"] != JobName.FENCE]
        for job_uuid in canceled:
            self.cancel_job(job_uuid, reason, cause=cause)
        return canceled

    def end_active_jobs(self, queued_reason: str, running_reason: str, *, cause: Cause
                        ) -> list[str]:
        """Cancel every active job: the queued ones (``queued_reason``), then the running one
        (``running_reason``); returns their uuids. Every command that ends the VM's life
        without a job, or takes it out of reach of jobs, comes here, in the save that does so
        (``Lifecycle.record_quarantined``, ``Lifecycle.record_destroyed_without_job``): a job
        left running would record steps, and an outcome, on a VM no job may change."""
        canceled = self.cancel_queued(queued_reason, cause=cause)
        running = self.cancel_running(running_reason, cause=cause)
        return canceled + ([running] if running is not None else [])

    def owed_fence(self) -> dict[str, Any] | None:
        """What ending the active jobs now leaves to do on the nodes, as a ``fence`` job's
        ``args``, or None when nothing is owed. A running job's worker may still be in a
        compute call, or paused before one, and the node admits that call until it has seen a
        newer fence for the VM; an active ``fence`` job has not done its work yet. So:
        ``{canceled_job_uuid, servers, macs}``, with the servers a copy may be on now and those
        an active fence job named, and the MACs of the NICs to give back once the fence is up
        (a running ``add_nics``'s, an active fence job's); and with a running job other than
        a fence job, ``canceled_job``: its ``uuid``, ``name`` and ``params``, for the fence
        job to settle what it did on the node (service/jobs/fence_settle.py; else the one an
        active fence job was to settle, passed on). Read it before the jobs end."""
        head = self.head_job
        running = head if head is not None and head["execution"] == Execution.RUNNING else None
        fences = [job for job in self.active_jobs if job["name"] == JobName.FENCE]
        if running is None and not fences:
            return None
        servers, macs = list(self.copy_servers), []
        for job in fences:
            servers += job["params"]["args"]["servers"]
            macs += job["params"]["args"]["macs"]
        if running is not None and running["name"] == JobName.ADD_NICS:
            macs += [nic["mac"] for nic in running["params"].get("args", {}).get("nics", [])]
        owed = {"canceled_job_uuid": (running or fences[-1])["uuid"],
                "servers": list(dict.fromkeys(servers)), "macs": list(dict.fromkeys(macs))}
        # what the canceled job did is settled by the fence job; a fence job ended before it
        # ran passes on the one it was to settle
        settles = [job["params"]["args"].get("canceled_job") for job in fences]
        if running is not None and running["name"] != JobName.FENCE:
            settles.append({"uuid": running["uuid"], "name": running["name"],
                            "params": running["params"]})
        canceled_job = next((job for job in reversed(settles) if job is not None), None)
        if canceled_job is not None:
            owed["canceled_job"] = canceled_job
        return owed

    def queue_fence(self, owed: dict[str, Any], *, cause: Cause) -> str:
        """Queue the ``fence`` job ``owed`` describes (``owed_fence``); returns its uuid. Its
        claim appends a ``JobStarted`` after the cancel, so its fence is newer than the
        canceled job's, and the node refuses the canceled worker's calls once it admits it
        (service/jobs/fence_job.py)."""
        job_uuid = str(uuid5(_FENCE_JOBS, owed["canceled_job_uuid"]))
        self.trigger_event(self.JobQueued, cause=cause, job_uuid=job_uuid,
                           name=JobName.FENCE.value,
                           params={"args": owed, "if_already": "succeed"})
        return job_uuid

    def _drop_job(self, job_uuid: str) -> None:
        self.active_jobs = [j for j in self.active_jobs if j["uuid"] != job_uuid]

