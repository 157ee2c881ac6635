"""Compute agents' reports (api.md ``PUT /vms/{uuid}`` and ``PUT /vms?server_uuid=``): what
they observe, with a monotonically increasing ``generation``."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any, Literal

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from domain.errors import VmNotFoundError
from service.api.auth import require_server
from service.api.deps import cause_of, parse_body, read_your_writes, services_of
from service.api.errors import invalid_parameters
from service.api.params import MAX_INTEGER, Query
from service.api.schemas import StrictModel

router = APIRouter(tags=["agents"])

Observed = Literal["running", "stopped", "failed"]


class VmReport(StrictModel):
    """``PUT /vms/{uuid}``: one VM as its server's agent sees it."""

    state: Observed
    server_uuid: uuidlib.UUID
    boot_id: str = Field(min_length=1, max_length=64)
    generation: int = Field(ge=1, le=MAX_INTEGER)


class ReportedVm(StrictModel):
    """One VM of an inventory."""

    state: Observed


class InventoryReport(StrictModel):
    """``PUT /vms?server_uuid=S``: every VM the agent knows, with its boot id and generation."""

    boot_id: str = Field(min_length=1, max_length=64)
    generation: int = Field(ge=1, le=MAX_INTEGER)
    vms: dict[uuidlib.UUID, ReportedVm] = Field(max_length=100_000)


@router.put("/vms/{vm_uuid}")
def put_vm(vm_uuid: str, request: Request, data: dict[str, Any] | None = Body(None)
           ) -> JSONResponse:
    """PutVm: apply one VM's observed state; answers the VM as it now is."""
    Query(request, set()).check()
    report = parse_body(request, VmReport, data)
    require_server(request, str(report.server_uuid))
    services = services_of(request)
    services.commands.load(vm_uuid)  # 404 for a VM the log never had
    services.agents.report_vm(vm_uuid.lower(), server_uuid=str(report.server_uuid),
                              state=report.state, boot_id=report.boot_id,
                              generation=report.generation, cause=cause_of(request))
    read_your_writes(request, services, ("vm_view",), eventual=False)
    vm = services.vms.get(vm_uuid.lower())
    if vm is None:
        raise VmNotFoundError(vm_uuid)
    return JSONResponse(vm, headers={"ETag": f'"{vm["version"]}"'})


@router.put("/vms")
def put_vms(request: Request, data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """PutVms: apply the agent's whole inventory; answers what happened to each VM it
    changed (``{vm_uuid: happening}``)."""
    query = Query(request, {"server_uuid"})
    server_uuid = query.uuid("server_uuid")
    if server_uuid is None and "server_uuid" not in query.params:
        raise invalid_parameters(request, [{"field": "server_uuid", "code": "Missing",
                                            "message": "required"}])
    query.check()
    report = parse_body(request, InventoryReport, data)
    require_server(request, server_uuid)
    services = services_of(request)
    changes = services.agents.report_inventory(
        server_uuid, boot_id=report.boot_id, generation=report.generation,
        vms={str(uuid): vm.state for uuid, vm in report.vms.items()}, cause=cause_of(request))
    return JSONResponse({"server_uuid": server_uuid, "generation": report.generation,
                         "changed": changes})
