"""What each job does when it gets the ticket. Every handler re-reads the VM first and decides
again (design.md, lesson 2: a destroy queued behind a provision finds out whether the VM got a
server), and every operation it asks of a compute node is idempotent (lesson 4): a boot or
reboot is named by its job, so a takeover that repeats it finds it done (docs/jobs.md).
"""

from __future__ import annotations

from collections.abc import Callable

from domain.errors import InvalidTransitionError
from domain.rules import Verdict, verdict
from domain.states import Action, JobName, VmState
from domain.vm import Vm
from service.commands.agents import record_happening
from service.jobs import copies, effects, fence_job, lost_answers, takeovers
from service.jobs.compute.driver import ComputeError
from service.jobs.placing import (
    claim_a_server, place_and_register, placed_by_an_earlier_attempt,
)
from service.jobs.run import JobRun, StepFailedError


def run(job: JobRun) -> None:
    """Run ``job`` to its end (succeeded or failed)."""
    handler = _HANDLERS[JobName(job.job["name"])]
    try:
        handler(job)
    except StepFailedError as failure:
        if lost_answers.settle_unknown(job, failure):
            return  # its step's work may have been done: ended as the node says, or waiting
        error = str(failure)
        # a server recorded removed is trusted to be gone: no copy a provision left is there
        gone = ({server for server in job.vm.copy_servers if copies.is_removed(job, server)}
                if job.vm.state == VmState.PROVISIONING else set())

        def record(vm: Vm) -> None:
            # Only a provision leaves the VM in a transient state when its step fails; other
            # jobs leave the VM as it was (the failed step is in the job's chain_results).
            if vm.state == VmState.PROVISIONING:
                left = vm.copy_servers if job.copies_left is None else job.copies_left
                left = [server for server in left if server not in gone]
                vm.record_provision_failed(error, cause=job.cause, copy_may_be_on=left)
            vm.give_back_added_nics(job.job, cause=job.cause)  # an add_nics's

        job.fail(error, record)


def _already(job: JobRun, verb: str) -> None:
    """The target state already holds: succeed doing nothing, or fail as VMAPI v1 does."""
    state = job.vm.state
    if job.params.get("if_already") == "fail":
        job.fail(f"Cannot {verb} a VM from a '{state}' state")
    else:
        job.succeed(note=f"already {state}: nothing to do")


def _at_the_ticket(vm: Vm, action: Action) -> Verdict:
    """The rules table's verdict on ``action`` now, as it was asked when the job was admitted
    (``Verdict.UNALLOCATED``, refused, for a VM on no server); ``ALLOWED`` implies a server."""
    return verdict(VmState(vm.state), action, has_server=vm.has_server)


def _refuse(job: JobRun, verb: str) -> None:
    job.fail(f"Cannot {verb} a VM in state '{job.vm.state}'")


def provision(job: JobRun) -> None:
    """Place the VM, create it on its server and boot it."""
    vm = job.vm
    if vm.state != VmState.PROVISIONING:
        job.succeed(note=f"VM is {vm.state}: nothing to provision")
        return
    vm_uuid = str(vm.id)
    # a takeover asks the nodes first; one that found nothing made carries on (row P1)
    if job.attempt > 1 and not takeovers.reconcile_provision(job, vm_uuid):
        return

    pinned = job.params.get("args", {}).get("server_uuid")
    try:
        server_uuid = place_and_register(job, pinned)
        run = effects.boot(job, server_uuid)
    except StepFailedError as failure:
        if failure.outcome_unknown:  # the node may have made the copy, or booted it: asked
            job.outcome_unknown = False
            takeovers.reconcile_provision(job, vm_uuid, giving_up=str(failure))
            return
        # Leave nothing half-made where a copy may be (the server it holds a claim on, if
        # any); the failure itself is what gets recorded, and whether the copy is known gone
        # decides whether the failure gives back the VM's NICs (run, above).
        job.copies_left = _unregistered_everywhere(job, vm_uuid)
        raise
    job.succeed(effects.booted(job, run,
                               lambda v: v.record_provisioned(server_uuid, cause=job.cause)))


def _unregistered_everywhere(job: JobRun, vm_uuid: str) -> list[str]:
    """Remove the VM from every server a copy may be on (``Vm.copy_servers``); returns the
    servers whose removal raised (none: each succeeded, or no node was touched), but those
    recorded removed, trusted to be gone with any copy (docs/jobs.md, "Removed servers"), its error
    not hidden from the caller: the copy there may still be configured with the VM's
    addresses, and the VM's destroy removes it (``ProvisionFailed.copy_may_be_on``)."""
    left = []
    for server_uuid in job.vm.copy_servers:
        try:
            job.driver.unregister(server_uuid, vm_uuid)
        except ComputeError:
            if not copies.is_removed(job, server_uuid):  # recorded removed: trusted gone
                left.append(server_uuid)
    return left


def start(job: JobRun) -> None:
    """Boot a stopped or failed VM: where it is, or placed anew when its server no longer has
    it (an eviction, a host reboot). A failed VM gave its capacity back, so it claims again."""
    vm = job.vm
    rule = _at_the_ticket(vm, Action.START)
    if rule is Verdict.ALREADY:
        _already(job, "start")
    elif rule is Verdict.ALLOWED:
        if _left_its_server(job, vm):
            _start_elsewhere(job, vm)
            return
        server_uuid = vm.server_uuid
        if vm.claim is None:
            job.step("place", lambda: claim_a_server(job, [server_uuid]))
        run = effects.boot(job, server_uuid)
        job.succeed(effects.booted(job, run, lambda v: v.record_started(cause=job.cause)))
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

    server_uuid = place_and_register(job, placed_by_an_earlier_attempt(job, vm_uuid))
    run = effects.boot(job, server_uuid)
    job.succeed(effects.booted(job, run, lambda v: v.record_started(cause=job.cause,
                                                           server_uuid=server_uuid)))


def stop(job: JobRun) -> None:
    """Stop a running (or failed) VM. A VM its server no longer has is stopped too when the
    log can tell it is gone (its host rebooted since, or it had failed): what the user asked
    for is what is true, and its capacity is given back (Omicron #6809). With the same boot
    id and the VM unknown, its agent forgot it and it may still run: the stop fails."""
    vm = job.vm
    rule = _at_the_ticket(vm, Action.STOP)
    if rule is Verdict.ALREADY:
        _already(job, "stop")
    elif rule is Verdict.ALLOWED:
        server_uuid = vm.server_uuid
        run = job.step("ensure_state", lambda: job.driver.ensure_state(
            server_uuid, str(vm.id), "stopped"))
        if run is None and vm.state == VmState.RUNNING \
                and not effects.host_rebooted_since(job, server_uuid):
            raise StepFailedError(f"VM {vm.id} is not on server {server_uuid}, whose agent no "
                                  "longer knows it (same boot id): it may still run")
        effects.record_stopped(job, gone=run is None)
    else:
        _refuse(job, "stop")


def reboot(job: JobRun) -> None:
    """Reboot a running VM: end the incarnation that runs and begin the next, once. A VM
    whose run already ended on its host (its guest shut it down) is not rebooted: the job
    fails and records what the host reports, as the agent's report would."""
    vm = job.vm
    if _at_the_ticket(vm, Action.REBOOT) is Verdict.ALLOWED:
        server_uuid = vm.server_uuid
        run = effects.boot(job, server_uuid, "rebooted")
        if run.begun_by != job.job_uuid:
            happening = effects.ended_by(run)
            job.fail(f"not rebooted: the VM is {run.state} on server {server_uuid}",
                     lambda v: record_happening(v, happening, job.cause) if happening else None)
            return
        job.succeed(effects.booted(job, run, lambda v: v.record_rebooted(cause=job.cause)))
    else:
        _refuse(job, "reboot")


def _reconfigure(job: JobRun, step: str, changes: dict, result: object) -> None:
    """Ask each server a copy of the VM may be on (``Vm.copy_servers``) to apply ``changes``,
    one step ``step`` each (recording ``result``), so a removed or unreachable server fails the
    job as any other step there would; a server without the copy changes nothing, and a
    removed one is passed over while another is live (service/jobs/copies.py). A VM on no
    server and holding no claim (its provision failed before placing it) has no node to ask."""
    if not job.vm.copy_servers:
        job.record_step(step, result=result)
        return
    copies.reconfigure_each(job, step, changes, lambda _server: result)


def update(job: JobRun) -> None:
    """Change alias, metadata or tags: on the VM's server first, then in the log."""
    changes = job.params.get("args", {})
    if job.vm.state == VmState.DESTROYED:
        _refuse(job, "update")
        return
    _reconfigure(job, "update_metadata", changes, sorted(changes))
    job.succeed(lambda v: v.update_metadata(changes, cause=job.cause) and None)


def destroy(job: JobRun) -> None:
    """Remove the VM from every server a copy of it may be on (``Vm.copy_servers``: its
    server, the server it holds a claim on, where a provision canceled by a quarantine
    left its copy before recording the server, and those a failed provision could not rule
    out; a removed one is passed over while another is live: service/jobs/copies.py) and
    mark it destroyed, its NICs' addresses released; with none, only mark it. A removal that
    fails every attempt fails the job: the VM is not destroyed and keeps its NICs and their
    addresses, as the copy there may be configured with them, and the error says so."""
    vm = job.vm
    if verdict(VmState(vm.state), Action.DESTROY, has_server=vm.has_server) is Verdict.ALREADY:
        if vm.addresses_kept:
            _fence_and_release(job)
            return
        _already(job, "destroy")
        return
    if not vm.copy_servers:
        job.record_step("mark_destroyed", result="no server: no compute node was touched")
    try:
        copies.on_each_copy_server(
            job, "unregister", lambda server: job.driver.unregister(server, str(vm.id)),
            "no copy to remove")
    except StepFailedError as failure:
        if not vm.nic_list:
            raise
        raise type(failure)(f"{failure}; the VM is not destroyed and keeps its NICs and "
                            "their addresses, as a copy there may be configured with "
                            "them") from None
    job.succeed(lambda v: v.record_destroyed(cause=job.cause))


def _fence_and_release(job: JobRun) -> None:
    """A version 1 DeleteVm of a VM destroyed at once whose addresses are still kept
    (``Destroyed.addresses_kept``: its ``fence`` job failed, or was given up): do that job's
    work again, under this job's fence, newer than the canceled job's, on every server a
    copy may be on (``Vm.copy_servers``; one recorded removed is trusted to be gone), then
    release the addresses. A server that still cannot be reached fails the job, the
    addresses kept, and a later DeleteVm tries again (docs/jobs.md, "A quarantine while a
    job runs")."""
    try:
        fence_job.fence_everywhere(job, job.vm.copy_servers, [])
    except StepFailedError as failure:
        job.fail(fence_job.kept(job, str(failure)))
        return
    job.succeed(lambda v: v.release_kept_addresses(cause=job.cause) and None)


def nics_changed(job: JobRun) -> None:
    """``add_nics`` / ``remove_nics``: ask the VM's server to apply the change. An
    ``add_nics``'s NICs and address claims were recorded when asked for
    (service/commands/nic_actions.py; a failed one, or one canceled before it ran, removes
    them again: ``Vm.give_back_added_nics``); a ``remove_nics`` records its NICs removed, and
    the change loop releases their addresses in the same transaction, only once the server
    applied it, so a failed one leaves the VM's NICs and claims as they were. An
    ``add_nics`` that finds the VM on no server (queued behind a provision that failed before
    placing it) fails, as the request would have been refused then
    (``nic_actions.refuse_nic_change``): no node can take its NICs, and a failed VM holds
    none (handlers.run gives them back)."""
    if job.vm.state == VmState.DESTROYED:
        _refuse(job, job.job["name"])
        return
    args = job.params.get("args", {})
    if job.job["name"] == JobName.REMOVE_NICS:
        _remove_nics(job, args.get("macs", []))
        return
    if not job.vm.has_server:
        raise StepFailedError(str(InvalidTransitionError(
            job.vm.state, job.job["name"], [], on_no_server=True)))
    _reconfigure(job, "apply_nics", {job.job["name"]: args}, args)
    job.succeed()


def _remove_nics(job: JobRun, macs: list[str]) -> None:
    """Remove those of the NICs ``macs`` the VM still has, decided again at the ticket:
    another job may have removed some since this one was asked for (the same removal with a
    job queued between, which the repeat rule does not merge; a failed or canceled
    ``add_nics``'s give-back). Those are as asked already, and a NIC job succeeds when its
    target already holds (nic_actions.IF_ALREADY; VMAPI's remove-nics passes over a NIC that
    NAPI no longer has). So the server is asked to remove only the others, the step's result
    names both (``{macs, already_removed}``), and only they are recorded removed; with none
    left the job succeeds saying it had nothing to do, asking no server and recording no
    ``NicsRemoved`` (it used to record the step with every MAC and so claim removals that
    an earlier job had made)."""
    present = job.vm.macs_it_has(macs)
    gone = [mac for mac in dict.fromkeys(macs) if mac not in present]
    if not present:
        job.succeed(note=f"already removed: the VM has no NIC {', '.join(gone)}: nothing to do")
        return
    result = {"macs": present, **({"already_removed": gone} if gone else {})}
    _reconfigure(job, "apply_nics", {JobName.REMOVE_NICS.value: {"macs": present}}, result)

    def record(vm: Vm) -> None:
        vm.remove_nics_it_has(present, cause=job.cause)

    job.succeed(record)


_HANDLERS: dict[JobName, Callable[[JobRun], None]] = {
    JobName.PROVISION: provision,
    JobName.START: start,
    JobName.STOP: stop,
    JobName.REBOOT: reboot,
    JobName.UPDATE: update,
    JobName.DESTROY: destroy,
    JobName.ADD_NICS: nics_changed,
    JobName.REMOVE_NICS: nics_changed,
    JobName.FENCE: fence_job.fence,
}

