"""Takeovers: a job whose worker was lost is taken over once its lease expires, and the next
worker first compares what the log says was done with what the host reports (docs/jobs.md,
"Takeovers", the decision table). Reconciling is not retrying: what took effect is adopted, no
effect is repeated, and a job with no attempts left still adopts what its lost workers did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from domain.rules import Verdict, verdict
from domain.states import Action, JobName, VmState
from service.commands.agents import record_happening
from service.jobs import effects, fence_job
from service.jobs.compute.driver import ComputeError, Incarnation, UnknownServerError
from service.jobs.compute.recorded_removals import REMOVED
from service.jobs.run import JobRun, StepFailedError

log = logging.getLogger(f"vmledger.{__name__}")


def give_up(job: JobRun) -> None:
    """End a job whose workers kept being lost: its attempts are bounded (the count is in
    each ``JobStarted``). Giving up is not undoing: what the host reports the lost workers
    did is adopted (a provision whose boot ran ends provisioned, a start or reboot that ran is
    recorded), and only what never took effect is failed (docs/jobs.md, "Takeovers")."""
    error = f"gave up after {job.attempt - 1} attempts: the workers running it were lost"
    name = JobName(job.job["name"])
    if name is JobName.FENCE:  # not the VM's provision, whatever its state
        job.fail(fence_job.kept(job, error))
        return
    if name is JobName.ADD_NICS:
        _give_up_nics(job, error)
        return
    if job.vm.state == VmState.PROVISIONING:
        reconcile_provision(job, str(job.vm.id), giving_up=error)
        return
    # a job that waited to ask the node what a lost answer did, and whose workers were lost
    # since until no attempt is left, still knows nothing: it waits again while the node
    # cannot be asked (row L4; ``JobRun.outcome_unknown`` is kept until the node answers)
    wait = job.outcome_unknown
    if name in (JobName.START, JobName.REBOOT) and adopt_effect(job, error, wait=wait):
        return
    if name is JobName.STOP and adopt_stop(job, wait=wait):
        return
    job.fail(error)


def _give_up_nics(job: JobRun, error: str) -> None:
    """End an ``add_nics`` given up: a lost worker's ``reconfigure`` may have reached the
    node, or still may, so this worker (its claim newer than theirs) raises its fence on
    every server a copy may be on and has the copy drop the job's NICs there, as a ``fence``
    job does for a canceled ``add_nics`` (service/jobs/fence_job.py); then the job fails and
    gives the NICs back, with their addresses. A server recorded removed is trusted to be
    gone (``fence_job._raise_on``); one not removed that could not be fenced leaves the VM
    its NICs: the job fails naming why, and the NICs and addresses stay the VM's, as the
    node may have them."""
    if drop_added_nics(job, error):
        job.fail(error, lambda vm: vm.give_back_added_nics(job.job, cause=job.cause) and None)


def drop_added_nics(job: JobRun, error: str) -> bool:
    """Raise the job's fence on every server a copy may be on and have the copy drop the
    ``add_nics`` job's NICs there (``fence_job.fence_everywhere``): True once every server
    did or cannot have them. Otherwise the job fails here, keeping the NICs and their
    addresses, as a node may have them (False)."""
    macs = [nic["mac"] for nic in job.params.get("args", {}).get("nics", [])]
    try:
        fence_job.fence_everywhere(job, job.vm.copy_servers, macs)
    except StepFailedError as failure:
        job.fail(f"{error}; its NICs are kept, as a node may have them: {failure}")
        return False
    return True


def adopt_stop(job: JobRun, *, wait: bool = False) -> bool:
    """If the host reports the VM not running (the lost workers' stop ran, or it is gone by
    the stop's own rule), record it stopped and end the job well; False if it still runs.
    A server that cannot be asked: False, or with ``wait`` the job left waiting for it
    (``_wait_for``, True), unless it is removed or unknown to the driver (False:
    ``_wait_unless_gone``)."""
    vm = job.vm
    if verdict(VmState(vm.state), Action.STOP, has_server=vm.has_server) is not Verdict.ALLOWED:
        return False  # the rules table: only a stop its handler would carry out is adopted
    server_uuid = vm.server_uuid
    try:
        run = job.driver.observe(server_uuid, str(vm.id))
    except ComputeError as failure:
        return wait and _wait_unless_gone(job, server_uuid, failure)
    # the answer's sequence number, recorded with it: a report the node took before the
    # stop landed is then older than the log, and cannot start the VM again
    job.record_step("reconcile", result=reported(server_uuid, run, job), observed=run)
    if run is not None and run.state == "running":
        return False
    if run is None and vm.state == VmState.RUNNING \
            and not effects.host_rebooted_since(job, server_uuid):
        return False  # unknown to its agent under the same boot id: it may still run
    effects.record_stopped(job, gone=run is None)
    return True


def adopt_effect(job: JobRun, error: str, *, wait: bool = False) -> bool:
    """If the VM's server reports a run this job began, record the boot it was (and what its
    guest did since) and end the job well; False if the host has no such run. A reboot's
    server that reports the run it was to end over (its guest shut it down, or crashed) ends
    the job failed with ``error`` here (True), recording what ended it as the answered
    reboot does (``handlers.reboot``, row R4): the observed run's ``NodeObserved`` makes
    every report taken before it older than the log, so only this job can record it. A
    server that cannot be asked: False, or with ``wait`` the job left waiting for it
    (True); one that is removed or unknown to the driver takes no call, and is not waited
    for (False: ``_cannot_answer``)."""
    vm = job.vm
    server_uuid = (vm.claim or {}).get("server_uuid") or vm.server_uuid
    if server_uuid is None:
        return False
    try:
        run = job.driver.observe(server_uuid, str(vm.id))
    except ComputeError as failure:
        return wait and _wait_unless_gone(job, server_uuid, failure)
    job.record_step("reconcile", result=reported(server_uuid, run, job), observed=run)
    if run is not None and run.begun_by != job.job_uuid \
            and JobName(job.job["name"]) is JobName.REBOOT:
        happening = effects.ended_by(run)
        if happening is not None:
            job.fail(f"{error}; not rebooted: the VM is {run.state} on server {server_uuid}",
                     lambda v: record_happening(v, happening, job.cause))
            return True
    if run is None or run.begun_by != job.job_uuid:
        return False
    if JobName(job.job["name"]) is JobName.REBOOT:
        job.succeed(effects.booted(job, run, lambda v: v.record_rebooted(cause=job.cause)))
    else:
        job.succeed(effects.booted(job, run, lambda v: v.record_started(
            cause=job.cause, server_uuid=server_uuid if server_uuid != vm.server_uuid else None)))
    return True


def _wait_unless_gone(job: JobRun, server_uuid: str, failure: ComputeError) -> bool:
    """Leave the job waiting for ``server_uuid``, whose ``observe`` raised ``failure``
    (``_wait_for``, True), unless asking again cannot help: a server removed (by its node's
    own report, or recorded so by an operator) is trusted to be gone and one the driver does
    not have takes no call (``UnknownServerError``, ``ServerRemovedError`` its kind), as a
    provision's look treats them (``_where_is``, ``_fenced``; docs/jobs.md, "Removed
    servers"). Then False: the job fails as its step did, as any job's step there does; it
    used to wait every lease until the stuck check quarantined the VM."""
    if isinstance(failure, UnknownServerError):
        return False
    return _wait_for(job, [server_uuid], _UNKNOWN_EFFECT)


def reported(server_uuid: str, run: Incarnation | None, job: JobRun) -> dict[str, object]:
    """The ``reconcile`` step's result: what the host reports, and whether this job began
    the run it reports."""
    if run is None:
        return {"server_uuid": server_uuid, "state": "absent"}
    return {"server_uuid": server_uuid, **run.as_result(),
            "begun_by_this_job": run.begun_by == job.job_uuid}


def reconcile_provision(job: JobRun, vm_uuid: str, *, giving_up: str | None = None) -> bool:
    """Take over a provision whose worker was lost (Triton ZAPI-599): ask the compute nodes
    what is really there and record it, never redoing a finished effect (docs/jobs.md).
    True when the provision is to carry on as a first attempt does (row P1: the caller
    places and boots it, ``handlers.provision``); False when this decided it.

    Absent from every server a copy may be on, each of which answered: nothing was made,
    and every server that answered took this takeover's fence, so no late call of the lost
    worker can land (a server it never claimed it cannot reach: its claim, a save, is
    refused now); with attempts left the provision carries on (True), with none
    (``giving_up``) it fails. Absent, but a server the VM claimed did not answer (fenced
    alone): a copy may be there, so the provision fails, keeping the NICs
    (``copy_may_be_on``). Present and booted by this job: it is provisioned, and
    whatever its guest did since (a shutdown, a crash) is recorded after, as the persistence
    policy answers; the boot is not replayed (Omicron #2209). Present and never booted: boot
    it, unless ``giving_up`` (no attempts left), when the copy is removed and the job fails.
    A failure gives back the VM's NICs only when every server the VM claimed answered that
    it has no copy (or had its copy removed): such a server that did not answer may come
    back with a copy still configured with the VM's addresses; one the VM never claimed has
    no copy of it (``Lifecycle.record_provision_failed``).

    Found nowhere while a server a copy may be on (``Vm.copy_servers``) could not be fenced
    (``unknown``, unreachable), nothing is decided: that server never saw this takeover's
    fence, so the lost worker's late boot could still land there once it is back. The job
    stays running and waits (``_wait_for``), and the next takeover asks again."""
    look = _where_is(job, vm_uuid)
    if look.found is None:
        if look.unfenced:
            _wait_for(job, look.unfenced)
            return False
        if giving_up is None and not job.vm.may_hold_a_copy(look.unanswered):
            job.record_step("reconcile", result={"state": "absent", "carry_on": True})
            job.outcome_unknown = False  # the nodes answered: nothing is unknown now
            return True
        error = giving_up or ("the worker provisioning it was lost, and a server it claimed "
                              "did not answer: a copy may be there")
        job.record_step("reconcile", result=None, error=error)
        job.fail(error, lambda v: v.record_provision_failed(
            error, cause=job.cause, copy_may_be_on=look.unanswered))
        return False
    server_uuid, run = look.found
    job.record_step("reconcile", result=reported(server_uuid, run, job), observed=run)
    if run.begun_by != job.job_uuid and run.state != "running":
        if giving_up is not None:
            left = _remove_everywhere(job, vm_uuid)
            job.fail(giving_up, lambda v: v.record_provision_failed(
                giving_up, cause=job.cause, copy_may_be_on=left))
            return False
        try:  # created but never booted: finish the provision, or leave nothing half-made
            run = effects.boot(job, server_uuid)
        except StepFailedError as failure:
            if failure.outcome_unknown:  # the boot may have run: asked as with none left (L8)
                job.outcome_unknown = False
                return reconcile_provision(job, vm_uuid, giving_up=str(failure))
            job.copies_left = _remove_everywhere(job, vm_uuid)  # handlers.run records it
            raise
    job.succeed(effects.booted(job, run,
                               lambda v: v.record_provisioned(server_uuid, cause=job.cause)))
    return False


@dataclass
class _Look:
    """What a provision's takeover found asking every server: the server that reports the
    VM, with its incarnation (None: none that answered); the servers that did not answer
    (of which those the VM claimed may have a copy: ``ProvisionFailed.copy_may_be_on``,
    which keeps only those, ``Placement.may_hold_a_copy``); and the servers a copy may be on
    that it could not fence (asked later)."""

    found: tuple[str, Incarnation] | None = None
    unanswered: list[str] = field(default_factory=list)
    unfenced: list[str] = field(default_factory=list)


def _where_is(job: JobRun, vm_uuid: str) -> _Look:
    """Ask the servers for the VM, the one it claims capacity on first, until one reports
    it. A server recorded removed (in the log, or by its node's own report) is trusted to
    be gone: it is not asked, holds no copy, and is neither ``unanswered`` nor ``unfenced``
    (its fence is still raised where its node takes it). Each look (``observe``) raises the
    takeover's fence there. A server that raises
    ``ComputeError`` is passed over (its copy, if any, is not found, so "found nowhere" then
    does not mean no copy); if a copy may be on it, its fence is raised alone
    (``raise_fence``: a server an operator recorded removed still takes it), and where that
    fails too, the server is ``unfenced``, unless it takes no call at all
    (``UnknownServerError``: not the driver's, or removed by its own report)."""
    fleet = job.driver.servers()
    servers = [server.uuid for server in fleet if server.status != REMOVED]
    claimed = (job.vm.claim or {}).get("server_uuid")
    look = _Look()
    for server in fleet:  # trusted gone: no copy there, but its node may still take a fence
        if server.status == REMOVED and server.uuid in job.vm.copy_servers:
            _fenced(job, server.uuid, vm_uuid)
    fleet_uuids = {server.uuid for server in fleet}
    # a claimed server the driver no longer lists is not asked: it did not answer either
    if claimed is not None and claimed not in fleet_uuids:
        look.unanswered.append(claimed)
    if claimed in servers:
        servers.remove(claimed)
        servers.insert(0, claimed)
    for server_uuid in servers:
        try:
            run = job.driver.observe(server_uuid, vm_uuid)
        except ComputeError:
            look.unanswered.append(server_uuid)
            if server_uuid in job.vm.copy_servers and not _fenced(job, server_uuid, vm_uuid):
                look.unfenced.append(server_uuid)
            continue
        if run is not None:
            look.found = (server_uuid, run)
            return look
    return look


def _fenced(job: JobRun, server_uuid: str, vm_uuid: str) -> bool:
    """Whether the lost worker's calls are refused on the server now: its fence raised
    there, or the server takes no call at all."""
    try:
        job.driver.raise_fence(server_uuid, vm_uuid)
    except UnknownServerError:
        return True
    except ComputeError:
        return False
    return True


_UNKNOWN_PROVISION = "whether it has a copy: the provision is decided once it answers"
_UNKNOWN_EFFECT = ("what the step whose answer was lost did there: the job is decided once "
                   "it answers")


def _wait_for(job: JobRun, unfenced: list[str], why: str = _UNKNOWN_PROVISION) -> bool:
    """Leave the provision (or a step whose answer was lost, ``why`` saying so:
    ``lost_answers.settle_unknown``) undecided: recorded as a ``reconcile`` step naming the
    servers that could not be asked, the job still running under this worker's lease, which is not
    renewed; its result ``{"waiting_for": [...]}`` marks the attempt as one that waited
    (``ActiveJob.waits``). Once the lease expires, another worker takes the job again
    (attempt + 1, a newer fence) and asks again; that re-take is no lost worker's: it is
    not counted in ``vmledger_job_lease_takeovers_total`` nor logged as taken over, and an
    attempt that waited does not count towards ``max_attempts`` (the worker's
    ``_claim_and_run``); attempts spent by lost workers, the giving up asks the same way
    (``give_up``). The job holds the ticket meanwhile, so no agent's report changes the
    VM; the next claim of a job other than a provision runs its handler again, each step
    counting as one whose answer may have been lost (``JobRun.outcome_unknown``). Returns
    True (the job is ended here: left waiting)."""
    error = (f"server {', '.join(unfenced)} could not be asked {why} (asked again when "
             "this lease expires)")
    job.record_step("reconcile", result={"waiting_for": unfenced}, error=error)
    job.outcome = "waiting"
    log.info("job %s waits for %s to answer", job.job["name"], ", ".join(unfenced),
             extra={"job_name": job.job["name"], "attempt": job.attempt})
    return True


def _remove_everywhere(job: JobRun, vm_uuid: str) -> list[str]:
    """Unregister the VM from every server that reports it (a provision that ends failed
    leaves no copy behind; a server recorded removed is trusted to be gone, and passed
    over). Returns the servers that did not answer or whose removal failed:
    a copy may be left there if the VM claimed it, which the failed VM's destroy removes
    (``ProvisionFailed.copy_may_be_on``, which keeps only those); none when every copy
    found was removed."""
    left = []
    for server in job.driver.servers():
        if server.status == REMOVED:
            continue  # trusted gone: no copy is left there
        try:
            if vm_uuid in job.driver.inventory(server.uuid):
                job.driver.unregister(server.uuid, vm_uuid)
        except ComputeError:
            left.append(server.uuid)
    return left
