"""What a ``fence`` job settles, once its fence is up, of the job a quarantine canceled while
it ran (docs/jobs.md, "A quarantine while a job runs", rows Q1 to Q4): its compute call may
have reached the node before the fence, and its worker could record nothing after the
cancel. So the node is asked, as for a step whose answer was lost
(service/jobs/lost_answers.py): a stop, start or reboot that took place is adopted in the
log (the VM stays quarantined, and its release gives it back as the node holds it:
``Vm.record_adopted_while_quarantined``; a VM released before its fence job ran records it
as the canceled job would have), and a reconfigure is set back on the node as the log has
it (the node cannot be read for a copy's configuration).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from domain.errors import IllegalTransitionError
from domain.events import Cause
from domain.states import JobName, VmState
from domain.transitions import after, while_quarantined
from domain.vm import Vm
from service.jobs import copies, effects
from service.jobs.compute.driver import Incarnation
from service.jobs.run import JobRun


def settle(job: JobRun) -> Callable[[Vm], None] | None:
    """Settle what the canceled job (the fence job's ``args["canceled_job"]``: its uuid, name
    and params, ``Vm.owed_fence``) did on the node; returns what to record with the fence
    job's success (the adopted event: ``_record``), or None. A fence job queued before its
    args named the canceled job, or one whose VM is destroyed, settles nothing. Steps ``reconcile``: the look at the VM's server (a stop,
    start or reboot), or the set back on each server a copy may be on (an update, a
    remove_nics). Raises ``StepFailedError`` when a step failed every attempt: then nothing
    is adopted, and the fence job fails saying so."""
    canceled = job.params.get("args", {}).get("canceled_job")
    if canceled is None or VmState(job.vm.state) is VmState.DESTROYED:
        return None
    name, args = JobName(canceled["name"]), canceled["params"].get("args", {})
    if name in (JobName.UPDATE, JobName.REMOVE_NICS):
        changes = copies.as_logged(job.vm, name, args)
        copies.reconfigure_each(job, "reconcile", changes, lambda server_uuid: {
            "server_uuid": server_uuid, "set_back": sorted(changes)})
        return None
    vm = job.vm
    # a start that placed the VM anew booted it on the server it claimed (as a takeover asks)
    server_uuid = (vm.claim or {}).get("server_uuid") or vm.server_uuid
    if name not in _ADOPTED or server_uuid is None:
        return None  # an add_nics's NICs the fence dropped; a provision is decided at release
    run = job.step("reconcile", lambda: job.driver.observe(server_uuid, str(vm.id)))
    event = _ADOPTED[name](run, canceled["uuid"])
    if event is None or not _follows(vm, event):
        return None
    placed = server_uuid if server_uuid != vm.server_uuid else None

    def adopt(v: Vm) -> None:
        _record(v, event, job.cause, placed)
        # what the canceled job asked took place after all: its ask holds again
        v.adopt_ask(canceled["name"], canceled["uuid"], cause=job.cause)
    # a boot also refreshes the addresses of the volumes it mounts, as the job's own would
    return adopt if event == "Stopped" else effects.booted(job, run, adopt)


def _stopped(run: Incarnation | None, _: str) -> str | None:
    # a copy found gone is left to the reports, which know a host reboot from a lost copy
    return "Stopped" if run is not None and run.state != "running" else None


def _began(event: str) -> Callable[[Incarnation | None, str], str | None]:
    def began(run: Incarnation | None, canceled_job_uuid: str) -> str | None:
        # only the run the canceled job began: another's (a guest's own reboot) is the reports'
        return event if run is not None and run.state == "running" \
            and run.begun_by == canceled_job_uuid else None
    return began


_ADOPTED: dict[JobName, Callable[[Incarnation | None, str], str | None]] = {
    JobName.STOP: _stopped, JobName.START: _began("Started"),
    JobName.REBOOT: _began("Rebooted")}


def _follows(vm: Any, event: str) -> bool:
    """Whether ``event`` follows the VM's state, or for a quarantined VM the state it is to
    be given back in (a stop of a VM already stopped adopts nothing)."""
    try:
        if VmState(vm.state) is VmState.QUARANTINED:
            while_quarantined(VmState(vm.quarantine["previous_state"]), event,
                              has_server=vm.has_server)
        else:
            after(VmState(vm.state), event, has_server=vm.has_server)
    except IllegalTransitionError:
        return False
    return True


def _record(vm: Vm, event: str, cause: Cause, placed: str | None) -> None:
    """Record the adopted ``event``: on a quarantined VM, kept for its release
    (``Vm.record_adopted_while_quarantined``); on one released before the fence job ran (it
    is the VM's head job, so no other job ran since), as the canceled job would have."""
    if VmState(vm.state) is VmState.QUARANTINED:
        vm.record_adopted_while_quarantined(event, cause=cause, server_uuid=placed)
    elif event == "Started":
        vm.record_started(cause=cause, server_uuid=placed)
    elif event == "Stopped":
        vm.record_stopped(cause=cause)
    else:
        vm.record_rebooted(cause=cause)
