"""The simulated fleet's control surface under ``/sim/`` (operator only; served only with the
simulated driver). What each call does is in docs/simulation.md."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Body, Request
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field

from domain.errors import ServerNotFoundError, VmNotFoundError
from service.api.auth import authorized_router
from service.api.deps import cause_of, parse_body, services_of
from service.api.errors import ApiError
from service.api.headers import versioned_headers
from service.api.query_parameters import Param, QueryParameters, one_of
from service.api.schemas import StrictModel
from service.api.vmapi_rules import is_uuid
from service.jobs.compute.driver import ComputeError
from service.jobs.compute.faults import OPERATIONS, Operation

router = authorized_router(prefix="/sim", tags=["simulation"])

NO_PARAMETERS = QueryParameters(scoped=False)
# These read no query (a parameter is ignored)
IGNORED = QueryParameters.ignored()
WORKERS = QueryParameters(Param("action", "pause: no job worker claims jobs; resume: they do",
                                one_of(("pause", "resume")), required=True), scoped=False)
SERVER_HAPPENING = QueryParameters(Param(
    "action", "what happens to the server (docs/simulation.md)",
    one_of(("reboot", "restart_agent", "remove", "restore", "report")), required=True),
    scoped=False)
GUEST_HAPPENING = QueryParameters(Param(
    "action", "shutdown: the guest powers itself off; crash: it crashes",
    one_of(("shutdown", "crash")), required=True), scoped=False)


class FaultRequest(StrictModel):
    """Fail the next ``count`` calls of ``operation``. Strict, as every other body's
    numbers are: a number in a string is refused naming its field."""

    model_config = ConfigDict(extra="forbid", strict=True)

    operation: Operation
    mode: Literal["fail", "lose_response"] = "fail"
    count: int = Field(1, ge=1, le=10_000)


class LatencyRequest(StrictModel):
    """Delay ``operation`` (or every operation when absent) by ``seconds``, a JSON number
    (``"1"`` was read as one second: a tester)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    seconds: float = Field(ge=0, le=60)
    operation: Operation | None = None


def _state(request: Request) -> dict[str, Any]:
    fleet = services_of(request).fleet
    return {
        "servers": [
            {**vars(server), "vms": fleet.inventory_all(server.uuid)} for server in fleet.servers()
        ],
        "faults": fleet.faults.pending(),
        "latency_s": {op: fleet.faults.latency(op) for op in OPERATIONS},
        "workers_paused": fleet.faults.workers_paused(),
    }


@router.get("", openapi_extra=NO_PARAMETERS)
def simulation(request: Request) -> JSONResponse:
    """The simulated world: servers with every VM copy on them, pending faults, latencies."""
    NO_PARAMETERS.parse(request).check()
    return JSONResponse(_state(request))


@router.post("/faults", openapi_extra=IGNORED)
def inject_fault(request: Request, data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """Make the next N calls of an operation fail, or lose their response after the work."""
    fault = parse_body(request, FaultRequest, data)
    services_of(request).fleet.faults.inject(fault.operation, fault.mode, fault.count)
    return JSONResponse(_state(request))


@router.delete("/faults", openapi_extra=IGNORED)
def clear_faults(request: Request) -> JSONResponse:
    """Remove every injected fault and latency; resume the workers."""
    services_of(request).fleet.faults.clear()
    return JSONResponse(_state(request))


@router.put("/latency", openapi_extra=IGNORED)
def set_latency(request: Request, data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """Delay simulated operations."""
    latency = parse_body(request, LatencyRequest, data)
    services_of(request).fleet.faults.set_latency(latency.seconds, latency.operation)
    return JSONResponse(_state(request))


@router.post("/workers", openapi_extra=WORKERS)
def workers(request: Request) -> JSONResponse:
    """``?action=pause`` stops every job worker from claiming jobs; ``resume`` lets them."""
    query = WORKERS.parse(request)
    action = query.params.get("action")
    if action not in ("pause", "resume"):
        query.invalid("action", "must be pause or resume")
    query.check()
    services = services_of(request)
    services.fleet.faults.pause_workers(action == "pause")
    if action == "resume":
        services.worker.wake()
    return JSONResponse(_state(request))


@router.post("/servers/{server_uuid}", openapi_extra=SERVER_HAPPENING)
def server_happening(server_uuid: str, request: Request) -> JSONResponse:
    """``?action=reboot`` (new boot id, its VMs gone), ``restart_agent`` (same boot id, the
    agent forgets its VMs), ``remove`` / ``restore`` (the server's status), ``report`` (the
    agent sends its inventory to vmledger, ``PUT /vms?server_uuid=``)."""
    query = SERVER_HAPPENING.parse(request)
    action = query.params.get("action")
    if action not in ("reboot", "restart_agent", "remove", "restore", "report"):
        query.invalid("action", "must be reboot, restart_agent, remove, restore or report")
    query.check()
    fleet = services_of(request).fleet
    try:
        if action == "report":
            # the simulated agent sends its inventory, as a real one would (PUT /vms), with
            # the node's sequence number it is as of: a job may record a step between taking
            # it and applying it, and then the report is older than the log for that VM
            report = fleet.report(server_uuid)
            reported = services_of(request).agents.report_inventory(
                server_uuid, boot_id=report["boot_id"], generation=report["generation"],
                vms={vm: seen["state"] for vm, seen in report["vms"].items()},
                cause=cause_of(request), seq=report["seq"])
            return JSONResponse({**report, "changed": reported.changed},
                                headers=versioned_headers(None, reported.position))
        if action == "reboot":
            fleet.reboot_server(server_uuid)
        elif action == "restart_agent":
            fleet.restart_agent(server_uuid)
        else:
            fleet.set_server_status(server_uuid, "removed" if action == "remove" else "running")
    except ComputeError:
        raise ServerNotFoundError(server_uuid) from None  # not in the simulated fleet
    return JSONResponse(_state(request))


@router.post("/vms/{vm_uuid}", openapi_extra=GUEST_HAPPENING)
def guest_happening(vm_uuid: str, request: Request) -> JSONResponse:
    """``?action=shutdown``: the guest powers itself off; ``crash``: it crashes. A VM with no
    copy in the simulated fleet is 404 (nothing could happen to it)."""
    query = GUEST_HAPPENING.parse(request)
    action = query.params.get("action")
    if action not in ("shutdown", "crash"):
        query.invalid("action", "must be shutdown or crash")
    query.check()
    fleet = services_of(request).fleet
    vm_uuid = vm_uuid.lower()  # a path's uuid is looked up in any case, as GetVm's
    if not is_uuid(vm_uuid):
        raise VmNotFoundError(vm_uuid)  # says it is no uuid (it was answered 200)
    if not fleet.copies(vm_uuid):
        raise ApiError(404, "ResourceNotFound",
                       f"VM {vm_uuid} has no copy in the simulated fleet")
    if action == "shutdown":
        fleet.shut_down_guest(vm_uuid)
    else:
        fleet.crash_guest(vm_uuid)
    return JSONResponse({"vm_uuid": vm_uuid, "copies": fleet.copies(vm_uuid)})
