"""The steps that must find a VM's copy wherever it may be (``Vm.copy_servers``: its server,
then the server it holds a claim on): the destroy's ``unregister``, and the ``reconfigure`` of
an update or a NIC change, and of the change that sets a copy back after one whose answer
was lost or that a quarantine canceled (service/jobs/handlers.py, lost_answers.py,
fence_settle.py; docs/jobs.md, "Removed servers").

A removed server is passed over while another of them is live: a start that placed the VM
anew and was canceled (a quarantine) before it recorded ``Started`` leaves the VM's server
the one its host rebooted, and its copy on the server it claimed; once the first is removed,
asking it would fail every later destroy, and the VM could not be deleted until the other
was removed too. Every one removed, each is asked as before, so the job fails there
(api.md, DeleteVm version 1: "a destroy job that fails"; version 2 destroys at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from domain.states import JobName
from domain.vm import Vm
from service.jobs.compute.driver import ComputeError
from service.jobs.compute.recorded_removals import REMOVED
from service.jobs.run import JobRun


def is_removed(job: JobRun, server_uuid: str) -> bool:
    """Whether the job's driver describes ``server_uuid`` as removed (its node reports it
    gone, or an operator recorded it: ``RecordedRemovalsRefused``). A server it cannot
    describe is not counted removed: a step there fails as it would have."""
    try:
        return job.driver.server_info(server_uuid).status == REMOVED
    except ComputeError:
        return False


def on_each_copy_server(job: JobRun, step: str, operation: Callable[[str], object],
                        passed_over: str) -> None:
    """Run ``operation(server_uuid)`` as step ``step`` on each of the VM's copy servers, in
    order. While one of them is live, a removed one is not asked: its step is recorded with
    the result ``"server <uuid> removed: <passed_over>"``. A removed server that only a
    failed provision names (``ProvisionFailed.copy_may_be_on``, stored before removed
    servers were left out of it) is always passed over: a server recorded removed is
    trusted to be gone, holding no copy. Raises ``StepFailedError`` as ``JobRun.step`` does
    (every one removed, the VM's own server or claim among them: ``server <uuid> is
    removed``, for the first asked)."""
    servers = job.vm.copy_servers
    removed = {server for server in servers if is_removed(job, server)}
    if removed == set(servers):  # nowhere else to look: the VM's own server and claim are
        # asked, each failing as a removed server does; one only a failed provision names
        # (copy_may_be_on) is trusted gone, recorded removed, and is passed over still
        own = {job.vm.server_uuid, (job.vm.claim or {}).get("server_uuid")}
        removed -= own
    for server_uuid in servers:
        if server_uuid in removed:
            job.record_step(step, result=f"server {server_uuid} removed: {passed_over}")
        else:
            job.step(step, lambda server=server_uuid: operation(server))


def reconfigure_each(job: JobRun, step: str, changes: dict[str, object],
                     result: Callable[[str], object]) -> None:
    """Ask each server a copy of the VM may be on to apply ``changes`` to it
    (``ComputeDriver.reconfigure``: whole values, NICs by MAC), one step ``step`` each whose
    result is ``result(server_uuid)``, as ``on_each_copy_server`` runs them (a server without
    the copy changes nothing). Shared by a job's own change (``handlers._reconfigure``) and
    the change that sets a copy back as the log has it (``lost_answers._set_back``). Raises
    ``StepFailedError`` as ``JobRun.step`` does."""
    vm_uuid = str(job.vm.id)

    def apply(server_uuid: str) -> object:
        job.driver.reconfigure(server_uuid, vm_uuid, changes)
        return result(server_uuid)

    on_each_copy_server(job, step, apply, "no copy to change")


def as_logged(vm: Vm, name: JobName, args: dict[str, Any]) -> dict[str, object]:
    """The change that puts a copy back as the log has it, undoing what an ``update`` or a
    ``remove_nics`` job (``name``, with ``args``) asked (whole values, NICs by MAC:
    ``ComputeDriver.reconfigure``): the log's values of the fields an update changes, the
    NICs a removal named that the VM has. Shared by a step whose answer was lost
    (``lost_answers._set_back``) and the ``fence`` job of such a job that a
    quarantine canceled (service/jobs/fence_settle.py)."""
    if name is JobName.REMOVE_NICS:
        macs = set(args.get("macs", []))
        return {"add_nics": {"nics": [nic for nic in vm.nic_list if nic["mac"] in macs]}}
    return {key: getattr(vm, key) for key in args if hasattr(vm, key)}
