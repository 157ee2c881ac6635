"""VM reads: ListVms, CountVms (HEAD), GetVm (also as it was: ``?version=``, ``?at=``) and a
VM's history. The commands (CreateVm, actions, DeleteVm) are ``service.api.routes_vm_commands``."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from domain.errors import VmNotFoundError
from domain.visibility import owner_sees
from projections.vm_markers import InvalidMarkerError
from service.api.auth import authorized_router
from service.api.deps import read_your_writes, services_of
from service.api.errors import invalid_parameters
from service.api.fast_json import FastJSONResponse
from service.api.headers import versioned_headers
from service.api.list_vms_params import LIST_VMS, ListVmsQuery
from service.api.query_parameters import (
    AS_IT_WAS, LIMIT, OWNERS_VM, Param, QueryParameters, integer,
)
from service.api.time_travel import as_it_was, owned_now, version_or_instant
from service.audit.history import vm_history

router = authorized_router()

GET_VM = QueryParameters(*AS_IT_WAS, OWNERS_VM)
HISTORY = QueryParameters(
    Param("after_version", "only events after this version of the VM", integer(0)),
    LIMIT, OWNERS_VM)


def _list(request: Request, *, rows: bool = True
          ) -> tuple[list[dict[str, Any]], int, str | None]:
    services = services_of(request)
    query = ListVmsQuery(request)
    read_your_writes(request, services, ("vm_view", "volume_mounts"), eventual=query.eventual)
    total = services.vms.count(query.vm_filter)
    if not rows:
        return [], total, None
    try:
        vms, next_marker = services.vms.list(query.vm_filter, query.page)
    except InvalidMarkerError as error:
        raise invalid_parameters(
            request, [{"field": "marker", "code": "Invalid",
                       "message": f"Invalid marker: {error}"}]) from None
    return [query.project(vm) for vm in vms], total, next_marker


@router.get("/vms", openapi_extra=LIST_VMS)
def list_vms(request: Request) -> JSONResponse:
    """ListVms: filters (also ``tag.K=V`` and ``internal_metadata.K=V``: only VMs whose tag or
    internal_metadata key K is V), then a page in a stable order; the total in
    x-joyent-resource-count."""
    vms, total, next_marker = _list(request)
    headers = {"x-joyent-resource-count": str(total)}
    if next_marker:
        headers["x-next-marker"] = next_marker
    return FastJSONResponse(vms, headers=headers)


@router.head("/vms", openapi_extra=LIST_VMS)
def count_vms(request: Request) -> Response:
    """CountVms: only the number of matches, in x-joyent-resource-count; no body (and no
    ``Content-Length`` for curl: service/api/connection.py)."""
    _vms, total, _ = _list(request, rows=False)
    return Response(headers={"x-joyent-resource-count": str(total)})


@router.get("/vms/{vm_uuid}", openapi_extra=GET_VM)
def get_vm(vm_uuid: str, request: Request) -> JSONResponse:
    """GetVm; ``?version=N`` or ``?at=RFC3339`` returns the VM as it was, folded from the log."""
    services = services_of(request)
    query = GET_VM.parse(request)
    version, at = version_or_instant(query)
    owner_uuid = query.owner_uuid
    if version is not None or at is not None:
        # only an owner needs the VM now (its own now?): the stream's fold to its head, which
        # a damaged stream cannot give (a version before the damage is still served)
        current = owned_now(services, vm_uuid, owner_uuid) if owner_uuid is not None else None
        vm = as_it_was(services, vm_uuid, version, at, owner_uuid=owner_uuid, current=current)
    else:
        read_your_writes(request, services, ("vm_view", "volume_mounts"),
                         eventual=query.eventual)
        vm = services.vms.get(vm_uuid.lower())
    if vm is None or (owner_uuid is not None and not owner_sees(vm["owner_uuid"], owner_uuid)):
        raise VmNotFoundError(vm_uuid)
    return FastJSONResponse(vm, headers=versioned_headers(vm["version"]))


@router.get("/vms/{vm_uuid}/history", openapi_extra=HISTORY)
def vm_history_route(vm_uuid: str, request: Request) -> JSONResponse:
    """Every event of the VM: version, position, timestamp, type, data, cause (paginated by
    ``after_version`` and ``limit``); an owner gets those it may see (``domain.visibility``)."""
    query = HISTORY.parse(request)
    after = query.integer("after_version", minimum=0) or 0
    limit = query.integer("limit", minimum=1, maximum=1000) or 1000
    query.check()
    services = services_of(request)
    owner_uuid = query.owner_uuid
    if owner_uuid is not None:  # unscoped, vm_history's own read says whether it exists
        owned_now(services, vm_uuid, owner_uuid)
    return JSONResponse(vm_history(services.commands, vm_uuid, after_version=after, limit=limit,
                                   scope_owner=owner_uuid))
