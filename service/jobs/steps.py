"""The steps jobs share (service/jobs/handlers.py says which job takes which): a boot named by
its job, recording a boot, asking the fleet where a VM is, removing it everywhere, and
claiming a server's capacity, recording a stop, and what a job given up adopts of what the
lost workers did."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from domain.errors import ServerNotFoundError, VolumeNotFoundError
from domain.policy import Happening
from domain.server import InsufficientCapacityError
from domain.states import JobName, VmState
from domain.vm import Vm
from service.commands.agents import record_happening
from service.jobs.compute.driver import ComputeError, Incarnation
from service.jobs.run import JobRun


def reported(server_uuid: str, run: Incarnation | None, job: JobRun) -> dict[str, object]:
    """The ``reconcile`` step's result: what the host reports, and whether this job began
    the run it reports."""
    if run is None:
        return {"server_uuid": server_uuid, "state": "absent"}
    return {"server_uuid": server_uuid, **run.as_result(),
            "begun_by_this_job": run.begun_by == job.job_uuid}


def boot(job: JobRun, server_uuid: str, target: str = "running") -> Incarnation:
    """The boot (or reboot) step, named by this job: a repeat of it does nothing more."""
    run = job.step("ensure_state", lambda: job.driver.ensure_state(
        server_uuid, str(job.vm.id), target, effect=job.job_uuid))  # type: ignore[arg-type]
    assert run is not None  # a boot of a VM the server does not have raises
    return run


def where_is(job: JobRun, vm_uuid: str) -> tuple[str, Incarnation] | None:
    """The server that reports the VM, with its incarnation, or None. The server the VM
    claims capacity on is asked first."""
    servers = [server.uuid for server in job.driver.servers()]
    claimed = (job.vm.claim or {}).get("server_uuid")
    if claimed in servers:
        servers.remove(claimed)
        servers.insert(0, claimed)
    for server_uuid in servers:
        with contextlib.suppress(ComputeError):
            run = job.driver.observe(server_uuid, vm_uuid)
            if run is not None:
                return server_uuid, run
    return None


def remove_everywhere(job: JobRun, vm_uuid: str) -> None:
    """Unregister the VM from every server that reports it (a provision that ends failed
    leaves no copy behind: the VM records no server, so no destroy would ever find it)."""
    for server in job.driver.servers():
        with contextlib.suppress(ComputeError):
            if vm_uuid in job.driver.inventory(server.uuid):
                job.driver.unregister(server.uuid, vm_uuid)


def claim_a_server(job: JobRun, candidates: list[str] | None = None) -> str:
    """Claim the VM's RAM and CPUs on the first of ``candidates`` (default: the placement's
    shortlist) that has room, recorded on the VM's and the server's streams in one
    transaction; the server the VM already holds a claim on, if any. Raises
    ``ComputeError`` when no server has room."""
    vm = job.vm
    if vm.claim is not None:
        return vm.claim["server_uuid"]
    shortlist = candidates if candidates is not None else job.context.placement(vm)
    if isinstance(shortlist, str):
        shortlist = [shortlist]
    for server_uuid in shortlist or []:
        try:
            job.claim(server_uuid)
        except (InsufficientCapacityError, ServerNotFoundError):
            continue
        return server_uuid
    raise ComputeError(f"no server has {vm.ram} MiB and {vm.cpus} CPUs free")


def placed_by_an_earlier_attempt(job: JobRun, vm_uuid: str) -> str | None:
    """On a takeover, the server an earlier attempt already created the VM on, as the compute
    nodes report it (design.md: a takeover first asks what is really there). Placing anew
    would pick another server, where the VM cannot be booted, and leave it on the first."""
    if job.job.get("attempt", 1) <= 1:
        return None
    for server in job.driver.servers():
        with contextlib.suppress(ComputeError):
            if vm_uuid in job.driver.inventory(server.uuid):
                return server.uuid
    return None


def record_booted(job: JobRun, run: Incarnation,
                  record: Callable[[Vm], None]) -> Callable[[Vm], None]:
    """``record`` (the VM booted), then the current addresses of the volumes it mounts, which
    it booted with (``VolumeAddressesRefreshed``, design.md lesson 6: a VM given fresh
    addresses no longer mounts stale ones), then what its guest did since, if the host
    reports the run over (a takeover finding a booted VM shut down: docs/jobs.md). Recorded
    after the boot, in the same save."""
    happening = what_ended(run)

    def booted(vm: Vm) -> None:
        record(vm)
        addresses: dict[str, str | None] = {}
        for mount in vm.volumes:
            try:
                volume = job.context.commands.load_volume(mount["volume_uuid"])
            except VolumeNotFoundError:
                addresses[mount["volume_uuid"]] = None
            else:
                addresses[mount["volume_uuid"]] = volume.address
        vm.record_volume_addresses(addresses, cause=job.cause)
        if happening is not None:
            record_happening(vm, happening, job.cause)

    return booted


def what_ended(run: Incarnation) -> Happening | None:
    """What ended a run the host reports over: its guest shut it down, or crashed."""
    return {"stopped": Happening.GUEST_SHUTDOWN, "failed": Happening.GUEST_CRASH}.get(run.state)


def adopt_stop(job: JobRun) -> bool:
    """If the host reports the VM not running (the lost workers' stop ran, or it is gone by
    the stop's own rule), record it stopped and end the job well; False if it still runs."""
    vm = job.vm
    if vm.state not in (VmState.RUNNING, VmState.FAILED) or vm.server_uuid is None:
        return False
    server_uuid = vm.server_uuid
    try:
        run = job.driver.observe(server_uuid, str(vm.id))
    except ComputeError:
        return False
    job.record_step("reconcile", result=reported(server_uuid, run, job))
    if run is not None and run.state == "running":
        return False
    if run is None and vm.state == VmState.RUNNING and not host_rebooted_since(job, server_uuid):
        return False  # unknown to its agent under the same boot id: it may still run
    record_stopped(job, gone=run is None)
    return True


def adopt_effect(job: JobRun) -> bool:
    """If the VM's server reports a run this job began, record the boot it was (and what its
    guest did since) and end the job well; False if the host has no such run."""
    vm = job.vm
    server_uuid = (vm.claim or {}).get("server_uuid") or vm.server_uuid
    if server_uuid is None:
        return False
    try:
        run = job.driver.observe(server_uuid, str(vm.id))
    except ComputeError:
        return False
    job.record_step("reconcile", result=reported(server_uuid, run, job))
    if run is None or run.begun_by != job.job_uuid:
        return False
    if JobName(job.job["name"]) is JobName.REBOOT:
        job.succeed(record_booted(job, run, lambda v: v.record_rebooted(cause=job.cause)))
    else:
        job.succeed(record_booted(job, run, lambda v: v.record_started(
            cause=job.cause, server_uuid=server_uuid if server_uuid != vm.server_uuid else None)))
    return True


def record_stopped(job: JobRun, *, gone: bool) -> None:
    """End the stop well: ``Stopped``; and when its server no longer has the VM, the capacity
    it held there is given back (nothing holds it there any more)."""
    def stopped(vm: Vm) -> None:
        vm.record_stopped(cause=job.cause)
        if gone:
            vm.release_capacity(cause=job.cause)

    job.succeed(stopped)


def host_rebooted_since(job: JobRun, server_uuid: str) -> bool:
    """Whether the server booted again since the log last recorded its boot id (so the VMs
    it had are gone, though no agent has reported it yet)."""
    try:
        reported = job.driver.server_info(server_uuid).boot_id
        recorded = job.patiently(lambda: job.context.commands.load_server(server_uuid).boot_id)
        return reported != recorded
    except (ComputeError, ServerNotFoundError):
        return False
