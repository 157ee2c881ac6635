"""The ``fence`` job: what a command that cancels a running job leaves to do on the nodes
(``Vm.owed_fence``; docs/jobs.md, "A quarantine while a job runs").

The canceled job's worker may still be in a compute call, or paused before one (a stopped
process, a long pause, a network holding the call), and the node admits that call for as long
as the newest fence it has seen for the VM is the canceled claim's. The fence job's claim is a
later ``JobStarted`` than the cancel, so its fence is newer: it raises it on each server a
copy may be on (``raise_fence``, ``ComputeDriver``'s contract), and from then on the canceled
worker's calls are refused there. A canceled ``add_nics`` may have reached the node before
that, so its NICs are asked to be dropped there under the new fence, and only then given back
in the log, with their addresses: no address is held by two VMs. A VM destroyed at once kept
all its addresses for the same reason (``Destroyed.addresses_kept``): they go back here too.
"""

from __future__ import annotations

from typing import Any

from domain.vm import Vm
from service.jobs import fence_settle
from service.jobs.compute.driver import ComputeError, ServerRemovedError, UnknownServerError
from service.jobs.copies import is_removed
from service.jobs.run import JobRun, StepFailedError


def fence(job: JobRun) -> None:
    """Raise the VM's fence on every server a copy may be on (those the cancel named, and the
    VM's now), one step ``fence`` each (a server recorded removed is trusted to be gone:
    nothing to fence there), then give back the canceled ``add_nics``'s NICs (``macs``),
    and release the addresses a VM destroyed at once kept (``Nics.release_kept_addresses``):
    no late call of the canceled job can configure a copy with them now; in the same save,
    what the canceled job did on the node is adopted, or set back there first
    (``fence_settle.settle``; a failure there fails the job, the fence being up all the
    same). Any other failure, once the step's attempts are spent, fails the job and gives
    nothing back: the NICs and their addresses stay the VM's, as the node may have them, and
    the job's error says so."""
    args = job.params.get("args", {})
    macs: list[str] = args.get("macs", [])
    servers = list(dict.fromkeys([*args.get("servers", []), *job.vm.copy_servers]))
    try:
        fence_everywhere(job, servers, macs)
    except StepFailedError as failure:
        job.fail(kept(job, str(failure)))
        return
    try:
        adopt = fence_settle.settle(job)
    except StepFailedError as failure:  # fenced: the NICs go back all the same
        job.fail(f"the canceled job's effect on the node could not be settled: {failure}",
                 lambda vm: give_back(job, macs, vm))
        return

    def give_back_and_adopt(vm: Vm) -> None:
        give_back(job, macs, vm)
        if adopt is not None:
            adopt(vm)

    job.succeed(give_back_and_adopt)


def give_back(job: JobRun, macs: list[str], vm: Vm) -> None:
    """Give back the canceled ``add_nics``'s NICs and the addresses a VM destroyed at once
    kept: every server a copy may be on is fenced."""
    vm.remove_nics_it_has(macs, cause=job.cause)
    vm.release_kept_addresses(cause=job.cause)


def kept(job: JobRun, error: str) -> str:
    """``error``, saying that the addresses a VM destroyed at once kept stay held (a fence
    job that failed or was given up: a copy a node may still have can use them)."""
    if not job.vm.addresses_kept:
        return error
    return (f"{error}; the destroyed VM's addresses are kept, as a copy on a server not "
            "fenced may be configured with them")


def fence_everywhere(job: JobRun, servers: list[str], macs: list[str]) -> None:
    """Raise ``job``'s fence on each of ``servers``, one step ``fence`` each (``_raise_on``,
    whatever the VM's state), having the copy there drop the NICs ``macs``; with none, a
    ``fence`` step saying no node was touched. Returns once every server dropped them or
    cannot have them (a server recorded removed holds no copy). Raises ``StepFailedError``
    when a server's step failed every attempt: that server may still admit an older fence,
    and may have the NICs."""
    vm_uuid = str(job.vm.id)
    if not servers:
        job.record_step("fence", result="no server: no compute node was touched")
    for server_uuid in servers:
        job.step("fence", lambda server=server_uuid: _raise_on(job, server, vm_uuid, macs),
                 whatever_the_state=True)


def _raise_on(job: JobRun, server_uuid: str, vm_uuid: str, macs: list[str]
              ) -> dict[str, Any]:
    """The fence step on one server: ``raise_fence``, then a look at the copy (``observe``),
    and with ``macs``, the copy there asked to drop those NICs, under the same fence. The
    result: the server and what it reports; ``refused`` when it takes no call at all (not
    the driver's, or removed by its own report: the canceled job's call cannot land there
    either). A server recorded removed in the log is trusted to be gone, as a version 2
    DeleteVm with no job running trusts it: the fence is still raised there if its node
    takes it (it may be up), nothing more is asked of it, and where even that fails the
    step succeeds all the same, ``removed`` saying so: it holds no copy that needs fencing,
    nor NICs to drop. Only a server not recorded removed that cannot be reached fails the
    step (``ComputeError``): its node may come back with a copy."""
    try:
        job.driver.raise_fence(server_uuid, vm_uuid)
    except UnknownServerError as unreachable:
        return {"server_uuid": server_uuid, "refused": str(unreachable)}
    except ComputeError as failure:
        if not is_removed(job, server_uuid):
            raise  # unreachable, not removed: its node may come back with a copy
        return {"server_uuid": server_uuid,
                "removed": f"recorded removed, so trusted gone: nothing to fence ({failure})"}
    try:
        run = job.driver.observe(server_uuid, vm_uuid)
        if run is not None and macs:
            job.driver.reconfigure(server_uuid, vm_uuid, {"remove_nics": {"macs": macs}})
    except ServerRemovedError as removed:  # recorded removed: the fence is up there all the same
        return {"server_uuid": server_uuid, "fence": "raised", "refused": str(removed),
                "nics_dropped": True}
    if run is None:
        return {"server_uuid": server_uuid, "state": "absent"}
    return {"server_uuid": server_uuid, **run.as_result()}
