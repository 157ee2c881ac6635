"""A job step given up after an answer that was lost (docs/jobs.md, "An answer lost on the
last attempt"): one of its attempts may have done the work on the node, so before the job
records the step as not done, the node is asked what it did, under the job's fence, as a
takeover asks (service/jobs/takeovers.py), and the job ends as the decision table says: an
effect that took place is adopted, one that did not fails the job as before, and nothing is
given back or decided while the node cannot be asked.
"""

from __future__ import annotations

from domain.states import JobName
from service.jobs import copies, takeovers
from service.jobs.compute.driver import ComputeError
from service.jobs.run import JobRun, StepFailedError


def settle_unknown(job: JobRun, failure: StepFailedError) -> bool:
    """Before a job whose step failed records it as not done: when one of the step's
    attempts may have done the work (its answer lost: ``failure.outcome_unknown``), ask the
    node what it did, under the job's fence, as a takeover would, and end the job as the
    decision table says (docs/jobs.md, "An answer lost on the last attempt"). True when the
    job was ended here (or left waiting); False when the effect did not take place, or was
    undone here: the caller fails the job as for any failed step (an ``add_nics`` giving its
    NICs back then).

    A boot or a reboot this job began, or a stop, that the node reports is adopted, the job
    succeeding (rows L1, L2); one it does not report fails the job as before, the node's
    answer recorded (L3); a node that cannot be asked leaves the job waiting, holding the
    ticket, for the next claim to ask again (L4, as P1w). What a ``reconfigure`` did cannot
    be read from a node (the protocol has no such call), so it is undone: an ``add_nics``'s
    NICs dropped on every server a copy may be on as row N1 does (where that fails, the job
    fails keeping them and their addresses: L5), an ``update``'s fields and a
    ``remove_nics``'s NICs set back on the node as the log has them (L6). A destroy whose
    every copy is gone is adopted (L7). A provision is reconciled as its takeover with no
    attempts left (L8: handlers.provision)."""
    if not failure.outcome_unknown:
        return False
    job.outcome_unknown = False  # asked now: what the node says settles it
    error = str(failure)
    name = JobName(job.job["name"])
    if name is JobName.ADD_NICS:
        return not takeovers.drop_added_nics(job, error)
    if name in (JobName.UPDATE, JobName.REMOVE_NICS):
        return _set_back(job, error)
    if name is JobName.DESTROY:
        return _adopt_destroy(job)
    if name in (JobName.START, JobName.REBOOT):
        return takeovers.adopt_effect(job, error, wait=True)
    # the rest: a provision settles its own lost answers (handlers.provision, row L8), and a
    # fence job ends its own failed steps (fence_job.fence): neither reaches here
    return takeovers.adopt_stop(job, wait=True) if name is JobName.STOP else False


def _set_back(job: JobRun, error: str) -> bool:
    """Put the copy on every server a copy may be on back as the log has it (``copies.as_logged``,
    one step ``reconcile`` each, under the job's fence): False once each did, so the job
    fails as if its change never ran. Where that fails too, the job fails here saying the
    node may hold the change (True)."""
    changes = copies.as_logged(job.vm, JobName(job.job["name"]), job.params.get("args", {}))
    try:
        copies.reconfigure_each(job, "reconcile", changes, lambda server_uuid: {
            "server_uuid": server_uuid, "set_back": sorted(changes)})
    except StepFailedError as failure:
        job.fail(f"{error}; its server may have applied the change, and setting the log's "
                 f"values back failed too: {failure}")
        return True
    return False


def _adopt_destroy(job: JobRun) -> bool:
    """If every server a copy may be on that is not recorded removed answers that it has
    none (a removal whose answer was lost took place), record the VM destroyed and end the
    job well; False if one still has it or cannot be asked (the destroy fails as it would,
    the VM keeping its NICs and addresses: a copy there may be configured with them)."""
    vm_uuid = str(job.vm.id)
    for server_uuid in job.vm.copy_servers:
        if copies.is_removed(job, server_uuid):
            continue  # trusted gone (docs/jobs.md, "Removed servers")
        try:
            run = job.driver.observe(server_uuid, vm_uuid)
        except ComputeError:
            return False
        job.record_step("reconcile", result=takeovers.reported(server_uuid, run, job),
                        observed=run)
        if run is not None:
            return False
    job.succeed(lambda v: v.record_destroyed(cause=job.cause))
    return True
