"""Where a job puts a VM: a claim of its RAM and CPUs on a server (the placement's best, or
one named), and the VM created there. Shared by the provision and by a start that must place
the VM anew (service/jobs/handlers.py).
"""

from __future__ import annotations

import contextlib

from domain.errors import ServerNotFoundError
from domain.server import InsufficientCapacityError
from service.jobs.compute.driver import ComputeError, ServerRemovedError, UnknownServerError
from service.jobs.run import JobRun, StepFailedError


def place_and_register(job: JobRun, named: str | None) -> str:
    """Claim a server for the VM (``named``, else the placement's best) and create the VM
    there; returns the server. A server the driver answers it does not know (registered in
    the log, absent from the compute fleet: tester B, B8) or has removed (since the
    placement's query) is not where a provision ends: its claim is given back (a ``release``
    step) and the next candidate is tried, so one such server cannot sink every provision.
    The answer is the one judge: a shortlist is out of date as soon as it is read, so the
    shortlist is not first checked against the driver's servers. A named server is the only
    candidate: its refusal fails the job. So does a server the driver does not know (not
    removed) after an attempt whose answer was lost (``OutcomeUnknownStepError``): that
    attempt may have made the copy there, so the provision is reconciled as its takeover
    with none left (``handlers.provision``, row L8), never placed on the next candidate with
    the copy left behind; a removed server is trusted gone (docs/jobs.md, "Removed
    servers"), and passed over. Raises ``StepFailedError``."""
    vm_uuid = str(job.vm.id)
    tried: set[str] = set()
    while True:
        server_uuid = job.step("place", lambda: claim_a_server(
            job, [named] if named else None, skip=tried))
        try:
            job.step("ensure_registered", lambda server=server_uuid: job.driver.ensure_registered(
                server, vm_uuid, ram_mib=job.vm.ram, metadata=job.vm.internal_metadata))
            return server_uuid
        except StepFailedError as failure:
            cause = failure.__cause__
            if named or not isinstance(cause, UnknownServerError) \
                    or (failure.outcome_unknown and not isinstance(cause, ServerRemovedError)):
                raise
            job.release_claim("release")
            tried.add(server_uuid)  # the loop ends: each pass leaves out one more server


def claim_a_server(job: JobRun, candidates: list[str] | None = None, *,
                   skip: set[str] | frozenset[str] = frozenset()) -> str:
    """Claim the VM's RAM and CPUs on the first of ``candidates`` (default: the placement's
    shortlist) that has room, recorded on the VM's and the server's streams in one
    transaction; the server the VM already holds a claim on, if any. Raises
    ``ComputeError`` when no server has room; when the only candidate was named (a pin, or
    the VM's own server), why that server refused: unknown, or short of room."""
    vm = job.vm
    if vm.claim is not None:
        return vm.claim["server_uuid"]
    shortlist = candidates if candidates is not None else job.context.placement(vm)
    if isinstance(shortlist, str):
        shortlist = [shortlist]
    shortlist = [server for server in shortlist or [] if server not in skip]
    refusals: list[str] = []
    for server_uuid in shortlist:
        try:
            job.claim(server_uuid)
        except ServerNotFoundError:
            refusals.append(f"server {server_uuid} is unknown")
            continue
        except InsufficientCapacityError as short:
            refusals.append(str(short))
            continue
        return server_uuid
    if candidates is not None and len(refusals) == 1:
        # a named server: "no server has room" would read as a full fleet
        raise ComputeError(refusals[0])
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
