"""What each job does when it gets the ticket. Every handler re-reads the VM first and decides
again (design.md, lesson 2: a destroy queued behind a provision finds out whether the VM got a
server), and every operation it asks of a compute node is idempotent (lesson 4): a boot or
reboot is named by its job, so a takeover that repeats it finds it done (docs/jobs.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from domain.rules import Verdict, verdict
from domain.states import Action, JobName, VmState
from domain.vm import Vm
from service.commands.agents import record_happening
from service.jobs.compute.driver import ComputeError
from service.jobs.run import JobRun, StepFailedError
from service.jobs.steps import (
    adopt_effect as _adopt_effect,
    adopt_stop as _adopt_stop,
    boot as _boot,
    record_booted as _booted,
    claim_a_server as _claim_a_server,
    what_ended as _happening,
    placed_by_an_earlier_attempt as _placed_by_an_earlier_attempt,
    host_rebooted_since as _host_rebooted_since,
    record_stopped as _record_stopped,
    remove_everywhere as _remove_everywhere,
    reported as _reported,
    where_is as _where_is,
)


def run(job: JobRun) -> None:
    """Run ``job`` to its end (succeeded or failed)."""
    handler = _HANDLERS[JobName(job.job["name"])]
    try:
        handler(job)
    except StepFailedError as failure:
        error = str(failure)

        def record(vm: Vm) -> None:
            # Only a provision leaves the VM in a transient state when its step fails; other
            # jobs leave the VM as it was (the failed step is in the job's chain_results).
            if vm.state == VmState.PROVISIONING:
                vm.record_provision_failed(error, cause=job.cause)

        job.fail(error, record)


def give_up(job: JobRun) -> None:
    """End a job whose workers kept being lost: its attempts are bounded (the count is in
    each ``JobStarted``). Giving up is not undoing: what the host reports the lost workers
    did is adopted (a provision whose boot ran ends provisioned, a start or reboot that ran is
    recorded), and only what never took effect is failed (docs/jobs.md, "Takeovers")."""
    error = f"gave up after {job.attempt - 1} attempts: the workers running it were lost"
    if job.vm.state == VmState.PROVISIONING:
        _reconcile_provision(job, str(job.vm.id), giving_up=error)
        return
    name = JobName(job.job["name"])
    if name in (JobName.START, JobName.REBOOT) and _adopt_effect(job):
        return
    if name is JobName.STOP and _adopt_stop(job):
        return
    job.fail(error)


def _already(job: JobRun, verb: str) -> None:
    """The target state already holds: succeed doing nothing, or fail as VMAPI v1 does."""
    state = job.vm.state
    if job.params.get("if_already") == "fail":
        job.fail(f"Cannot {verb} a VM from a '{state}' state")
    else:
        job.succeed(note=f"already {state}: nothing to do")


def _refuse(job: JobRun, verb: str) -> None:
    job.fail(f"Cannot {verb} a VM in state '{job.vm.state}'")


def provision(job: JobRun) -> None:
    """Place the VM, create it on its server and boot it."""
    vm = job.vm
    if vm.state != VmState.PROVISIONING:
        job.succeed(note=f"VM is {vm.state}: nothing to provision")
        return
    vm_uuid = str(vm.id)
    if job.attempt > 1:
        _reconcile_provision(job, vm_uuid)
        return

    pinned = job.params.get("args", {}).get("server_uuid")
    server_uuid = job.step("place", lambda: _claim_a_server(job, [pinned] if pinned else None))
    try:
        job.step("ensure_registered", lambda: job.driver.ensure_registered(
            server_uuid, vm_uuid, ram_mib=vm.ram, metadata=vm.internal_metadata))
        run = _boot(job, server_uuid)
    except StepFailedError:
        # Leave nothing half-made on the server; the failure itself is what gets recorded.
        with contextlib.suppress(ComputeError):
            job.driver.unregister(server_uuid, vm_uuid)
        raise
    job.succeed(_booted(job, run, lambda v: v.record_provisioned(server_uuid, cause=job.cause)))


def _reconcile_provision(job: JobRun, vm_uuid: str, *, giving_up: str | None = None) -> None:
    """Take over a provision whose worker was lost (Triton ZAPI-599): ask the compute nodes
    what is really there and record it, never redoing a finished effect (docs/jobs.md).

    Absent: the provision failed. Present and booted by this job: it is provisioned, and
    whatever its guest did since (a shutdown, a crash) is recorded after, as the persistence
    policy answers; the boot is not replayed (Omicron #2209). Present and never booted: boot
    it, unless ``giving_up`` (no attempts left), when the copy is removed and the job fails."""
    found = _where_is(job, vm_uuid)
    if found is None:
        error = giving_up or "the worker provisioning it was lost before the VM was created"
        job.record_step("reconcile", result=None, error=error)
        job.fail(error, lambda v: v.record_provision_failed(error, cause=job.cause))
        return
    server_uuid, run = found
    job.record_step("reconcile", result=_reported(server_uuid, run, job))
    if run.begun_by != job.job_uuid and run.state != "running":
        if giving_up is not None:
            _remove_everywhere(job, vm_uuid)
            job.fail(giving_up, lambda v: v.record_provision_failed(giving_up, cause=job.cause))
            return
        try:  # created but never booted: finish the provision, or leave nothing half-made
            run = _boot(job, server_uuid)
        except StepFailedError:
            _remove_everywhere(job, vm_uuid)
            raise
    job.succeed(_booted(job, run, lambda v: v.record_provisioned(server_uuid, cause=job.cause)))


def start(job: JobRun) -> None:
    """Boot a stopped or failed VM: where it is, or placed anew when its server no longer has
    it (an eviction, a host reboot). A failed VM gave its capacity back, so it claims again."""
    vm = job.vm
    rule = verdict(VmState(vm.state), Action.START)  # the rules table, at the ticket
    if rule is Verdict.ALREADY:
        _already(job, "start")
    elif rule is Verdict.ALLOWED and vm.server_uuid:
        if _left_its_server(job, vm):
            _start_elsewhere(job, vm)
            return
        server_uuid = vm.server_uuid
        if vm.claim is None:
            job.step("place", lambda: _claim_a_server(job, [server_uuid]))
        run = _boot(job, server_uuid)
        job.succeed(_booted(job, run, lambda v: v.record_started(cause=job.cause)))
    else:
        _refuse(job, "start")


def _left_its_server(job: JobRun, vm: Vm) -> bool:
    """Whether the VM's server reports that it no longer has the VM (its host took it away,
    or rebooted). A server that cannot answer is assumed to still have it, so the start is
    tried there and fails there."""
    try:
        return str(vm.id) not in job.driver.inventory(vm.server_uuid)
    except ComputeError:
        return False


def _start_elsewhere(job: JobRun, vm: Vm) -> None:
    """Place a VM its server no longer has (on the server it still holds a claim on, else
    anew), create it there and boot it; the VM records its server (a restarted trace task
    may land on another machine, data/README.md)."""
    vm_uuid = str(vm.id)

    earlier = _placed_by_an_earlier_attempt(job, vm_uuid)
    server_uuid = job.step("place", lambda: _claim_a_server(job, [earlier] if earlier else None))
    job.step("ensure_registered", lambda: job.driver.ensure_registered(
        server_uuid, vm_uuid, ram_mib=vm.ram, metadata=vm.internal_metadata))
    run = _boot(job, server_uuid)
    job.succeed(_booted(job, run, lambda v: v.record_started(cause=job.cause,
                                                           server_uuid=server_uuid)))


def stop(job: JobRun) -> None:
    """Stop a running (or failed) VM. A VM its server no longer has is stopped too when the
    log can tell it is gone (its host rebooted since, or it had failed): what the user asked
    for is what is true, and its capacity is given back (Omicron #6809). With the same boot
    id and the VM unknown, its agent forgot it and it may still run: the stop fails."""
    vm = job.vm
    rule = verdict(VmState(vm.state), Action.STOP)
    if rule is Verdict.ALREADY:
        _already(job, "stop")
    elif rule is Verdict.ALLOWED and vm.server_uuid:
        server_uuid = vm.server_uuid
        run = job.step("ensure_state", lambda: job.driver.ensure_state(
            server_uuid, str(vm.id), "stopped"))
        if run is None and vm.state == VmState.RUNNING \
                and not _host_rebooted_since(job, server_uuid):
            raise StepFailedError(f"VM {vm.id} is not on server {server_uuid}, whose agent no "
                                  "longer knows it (same boot id): it may still run")
        _record_stopped(job, gone=run is None)
    else:
        _refuse(job, "stop")


def reboot(job: JobRun) -> None:
    """Reboot a running VM: end the incarnation that runs and begin the next, once. A VM
    whose run already ended on its host (its guest shut it down) is not rebooted: the job
    fails and records what the host reports, as the agent's report would."""
    vm = job.vm
    if verdict(VmState(vm.state), Action.REBOOT) is Verdict.ALLOWED and vm.server_uuid:
        server_uuid = vm.server_uuid
        run = _boot(job, server_uuid, "rebooted")
        if run.begun_by != job.job_uuid:
            happening = _happening(run)
            job.fail(f"not rebooted: the VM is {run.state} on server {server_uuid}",
                     lambda v: record_happening(v, happening, job.cause) if happening else None)
            return
        job.succeed(_booted(job, run, lambda v: v.record_rebooted(cause=job.cause)))
    else:
        _refuse(job, "reboot")


def update(job: JobRun) -> None:
    """Change alias, metadata or tags (no compute call is needed for these fields)."""
    changes = job.params.get("args", {})
    if job.vm.state == VmState.DESTROYED:
        _refuse(job, "update")
        return
    job.record_step("update_metadata", result=sorted(changes))
    job.succeed(lambda v: v.update_metadata(changes, cause=job.cause) and None)


def destroy(job: JobRun) -> None:
    """Remove the VM from its server and mark it destroyed; with no server, only mark it."""
    vm = job.vm
    if verdict(VmState(vm.state), Action.DESTROY) is Verdict.ALREADY:
        _already(job, "destroy")
        return
    if vm.server_uuid is None:
        job.record_step("mark_destroyed", result="no server: no compute node was touched")
    else:
        server_uuid = vm.server_uuid
        job.step("unregister", lambda: job.driver.unregister(server_uuid, str(vm.id)))
    job.succeed(lambda v: v.record_destroyed(cause=job.cause))


def nics_changed(job: JobRun) -> None:
    """``add_nics`` / ``remove_nics``: the NICs and their address claims were recorded when
    asked for (service/commands/nic_actions.py); the simulated compute nodes need no call."""
    if job.vm.state == VmState.DESTROYED:
        _refuse(job, job.job["name"])
        return
    job.record_step("apply_nics", result=job.params.get("args", {}))
    job.succeed()


_HANDLERS: dict[JobName, Callable[[JobRun], None]] = {
    JobName.PROVISION: provision,
    JobName.START: start,
    JobName.STOP: stop,
    JobName.REBOOT: reboot,
    JobName.UPDATE: update,
    JobName.DESTROY: destroy,
    JobName.ADD_NICS: nics_changed,
    JobName.REMOVE_NICS: nics_changed,
}

