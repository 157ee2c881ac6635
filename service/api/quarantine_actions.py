"""``POST /vms/{uuid}?action=quarantine|release`` (operator): answered at once with the VM
(200), no job, so a stuck job cannot stand in the way (api.md, design.md lesson 3)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import Field

from domain.errors import VmNotFoundError
from service.api.action_params import asked_params, without_action
from service.api.deps import (
    behaviour_of, cause_of, idempotency_of, if_match_of, parse_body, read_your_writes,
    services_of,
)
from service.api.params import Query
from service.api.schemas import StrictModel

QUARANTINE_ACTIONS = ("quarantine", "release")


class QuarantineRequest(StrictModel):
    """Why the operator takes the VM."""

    reason: str = Field(min_length=1, max_length=1024)


def quarantine_action(vm_uuid: str, request: Request, data: Any, name: str) -> JSONResponse:
    """Quarantine (with ``reason``) or release the VM (``name``, from the query or the body:
    ``action_params.action_of``); answers the VM as it now is."""
    query = Query(request, {"action"})
    query.check()
    services = services_of(request)
    if_match, cause = if_match_of(request), cause_of(request)
    params, rest = asked_params(request, data)
    idempotency = idempotency_of(request, rest, cause, params=params)
    if name == "quarantine":
        reason = parse_body(request, QuarantineRequest, without_action(data)).reason
        services.quarantine.quarantine(vm_uuid.lower(), reason, cause=cause, if_match=if_match,
                                       idempotency=idempotency, behaviour=behaviour_of(request))
    else:
        parse_body(request, StrictModel, without_action(data))
        services.quarantine.release(vm_uuid.lower(), cause=cause, if_match=if_match,
                                    idempotency=idempotency, behaviour=behaviour_of(request))
    read_your_writes(request, services, ("vm_view",), eventual=False)
    vm = services.vms.get(vm_uuid.lower())
    if vm is None:
        raise VmNotFoundError(vm_uuid)
    return JSONResponse(vm, headers={"ETag": f'"{vm["version"]}"'})
