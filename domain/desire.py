"""What a VM's ``desired_state`` means, and how it follows the jobs that ask for a state
(docs/jobs.md, "The desired state").

``desired_state`` is what the operator asked of the VM that is still pending or that the node
now does: never an ask that failed. A job that asks for a state sets it when it is queued
(``JobQueued``: provision, start and reboot ask for ``running``, stop for ``stopped``, destroy
for ``destroyed``; ``states.JOB_DESIRES``). When such a job ends without doing what it asked
(``JobFailed``, or ``JobCanceled``: by a quarantine, a DeleteVm, a destroy at once), its ask is
withdrawn in the same save (``DesiredStateSet``, only when the desire changes):

- a job of the queue queued after it that asks for a state is newer: its ask stands;
- else one queued before it that is still active (a running job, when a quarantine cancels
  the queued ones first) is still pending: its ask holds;
- else the desire is the one the VM's state stands for (``of_state``): ``running`` for a
  running, failed or provisioning VM (a failed VM is one that should run: it failed while
  running, or its provision failed), ``stopped`` for a stopped one, ``destroyed`` for a
  destroyed one, and for a quarantined one that of the state it is to be given back in.

A stop that failed so leaves a running VM desired ``running``, and a ``persistent`` VM whose host
then reboots is started again (``service.commands.agents.record_happening`` restarts a failed VM
only when it is desired running); it was left desired ``stopped``, failed for good. What a job
the quarantine canceled did on the node, adopted by its ``fence`` job
(service/jobs/fence_settle.py), is what it asked taking place after all: ``adopt_ask`` sets its
desire again, unless a newer ask is pending.

A mixin of ``domain.vm.Vm``, which names the event (``Vm.DesiredStateSet``).
"""

from __future__ import annotations

from typing import Any

from domain.events import Cause
from domain.states import JOB_DESIRES, DesiredState, VmState
from domain.vm_events import VmEvent

# The desire each state stands for, when no job's ask is pending (a quarantined VM: that of
# the state it is to be given back in).
_OF_STATE: dict[VmState, DesiredState] = {
    VmState.PROVISIONING: DesiredState.RUNNING,
    VmState.RUNNING: DesiredState.RUNNING,
    VmState.FAILED: DesiredState.RUNNING,
    VmState.STOPPED: DesiredState.STOPPED,
    VmState.DESTROYED: DesiredState.DESTROYED,
}


class DesiredStateSet(VmEvent):
    """The VM's desired state became ``desired_state`` (a ``DesiredState`` value) for
    ``reason``: a job's ask was withdrawn (it failed or was canceled), or a canceled job's
    effect was adopted (``Desires``)."""

    TOPIC = "vm.desired_state_set"
    desired_state: str
    reason: str

    def apply(self, vm: Any) -> None:
        vm.desired_state = DesiredState(self.desired_state)


def of_state(vm: Any) -> DesiredState:
    """The desire ``vm``'s state stands for (``_OF_STATE``; a quarantined VM's: that of its
    ``quarantine["previous_state"]``)."""
    state = VmState(vm.state)
    if state is VmState.QUARANTINED and vm.quarantine is not None:
        state = VmState(vm.quarantine["previous_state"])
    return _OF_STATE.get(state, DesiredState.RUNNING)


def after_ending(vm: Any, job_uuid: str) -> DesiredState | None:
    """The desire once the active job ``job_uuid`` ends without doing what it asked, or None
    when its ending changes none: it asks for no state, or a job queued after it does (the
    newer ask stands). Read before the job leaves the queue."""
    jobs = vm.active_jobs
    at = next((n for n, job in enumerate(jobs) if job["uuid"] == job_uuid), None)
    if at is None or jobs[at]["name"] not in JOB_DESIRES:
        return None
    if any(job["name"] in JOB_DESIRES for job in jobs[at + 1:]):
        return None
    earlier = [job for job in jobs[:at] if job["name"] in JOB_DESIRES]
    return JOB_DESIRES[earlier[-1]["name"]] if earlier else of_state(vm)


class Desires:
    """The commands that set ``desired_state`` outside ``JobQueued``."""

    # Provided by ``Vm``.
    desired_state: DesiredState
    active_jobs: list[dict[str, Any]]
    trigger_event: Any

    def desire_after_ending(self, job_uuid: str) -> DesiredState | None:
        """``after_ending`` of this VM (``JobQueue`` asks it before a job ends)."""
        return after_ending(self, job_uuid)

    def withdraw_ask(self, desired: DesiredState | None, job: dict[str, Any], ended: str, *,
                     cause: Cause) -> None:
        """Record ``desired`` (``desire_after_ending``, read before ``job`` left the queue) as the
        VM's desire once ``job`` ``ended`` (``failed``, ``was canceled``) without doing what
        it asked; nothing when it is None or the desire already."""
        if desired is not None and desired != self.desired_state:
            self.trigger_event(
                DesiredStateSet, cause=cause, desired_state=desired.value,
                reason=f"the {job['name']} job {job['uuid']} {ended}: what it asked for is "
                       "withdrawn")

    def adopt_ask(self, job_name: str, job_uuid: str, *, cause: Cause) -> None:
        """Record the desire of the canceled job ``job_name`` (``job_uuid``) whose effect on
        the node its ``fence`` job adopted: what it asked took place after all. Nothing when
        an active job asks for a state (queued since: the newer ask stands), or it asks
        for none."""
        desired = JOB_DESIRES.get(job_name)
        if desired is None or desired == self.desired_state or any(
                job["name"] in JOB_DESIRES for job in self.active_jobs):
            return
        self.trigger_event(
            DesiredStateSet, cause=cause, desired_state=desired.value,
            reason=f"the canceled {job_name} job {job_uuid} took place on the node (adopted "
                   "by its fence job)")
