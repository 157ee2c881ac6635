"""The effects a job has on a compute node, and how they are recorded: a boot or reboot named
by its job (so a repeat finds it done, docs/jobs.md "Incarnations"), what the guest did since a
run the host reports over, and a stop of a VM its server no longer has. Shared by the job
handlers (service/jobs/handlers.py) and the takeovers (service/jobs/takeovers.py).
"""

from __future__ import annotations

from collections.abc import Callable

from domain.errors import ServerNotFoundError, VolumeNotFoundError
from domain.policy import Happening
from domain.vm import Vm
from service.commands.agents import record_happening
from service.jobs.compute.driver import ComputeError, Incarnation
from service.jobs.run import JobRun


def boot(job: JobRun, server_uuid: str, target: str = "running") -> Incarnation:
    """The boot (or reboot) step, named by this job: a repeat of it does nothing more."""
    run = job.step("ensure_state", lambda: job.driver.ensure_state(
        server_uuid, str(job.vm.id), target, effect=job.job_uuid))  # type: ignore[arg-type]
    assert run is not None  # a boot of a VM the server does not have raises
    return run


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


def booted(job: JobRun, run: Incarnation,
            record: Callable[[Vm], None]) -> Callable[[Vm], None]:
    """``record`` (the VM booted), then the current addresses of the volumes it mounts, which
    it booted with (``VolumeAddressesRefreshed``, design.md lesson 6: a VM given fresh
    addresses no longer mounts stale ones), then what its guest did since, if the host
    reports the run over (a takeover finding a booted VM shut down: docs/jobs.md). Recorded
    after the boot, in the same save."""
    happening = ended_by(run)

    def record_boot(vm: Vm) -> None:
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

    return record_boot


def ended_by(run: Incarnation) -> Happening | None:
    """What ended a run the host reports over: its guest shut it down, or crashed."""
    return {"stopped": Happening.GUEST_SHUTDOWN, "failed": Happening.GUEST_CRASH}.get(run.state)
