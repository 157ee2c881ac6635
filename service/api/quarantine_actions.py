"""``POST /vms/{uuid}?action=quarantine|release`` (operator): answered at once with the VM
(200), no job, so a stuck job cannot stand in the way (api.md, design.md lesson 3); nor does
a lagging projector: the VM is rendered from the saved aggregate, not read from ``vm_view``."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from service.api.action_params import without_action
from service.api.deps import (
    behaviour_of, cause_of, idempotency_of, if_match_of, parse_body, services_of,
)
from service.api.headers import versioned_headers
from service.api.vm_actions import ACTION_BODIES, QUARANTINE_QUERY


def quarantine_action(vm_uuid: str, request: Request, data: Any, name: str) -> JSONResponse:
    """Quarantine (with ``reason``) or release the VM (``name``, from the query or the body:
    ``action_params.action_of``); answers ``200`` with the VM object as the command left it
    (GetVm's shape, ``ETag`` its version): folded from its stream at the version the command
    saved (a repeat of an ``Idempotency-Key``: the first's) and rendered as ``vm_view``
    renders it (``VmQueries.render``), so the answer does not wait for the projector and is
    what GetVm gives once the read model reaches it. Waiting for ``vm_view`` answered a bare
    read-timeout ``503`` after the append while the projector lagged, and a retried release
    was then ``409`` (found by a tester). ``?owner_uuid=`` scopes it as every action's: another
    owner's VM is not found (it was validated, then ignored: a tester). Raises what the
    commands raise
    (``VmNotFoundError``, ``InvalidTransitionError``, ...)."""
    query = QUARANTINE_QUERY.parse(request)
    query.check()
    services = services_of(request)
    if_match, cause = if_match_of(request), cause_of(request)
    parsed = parse_body(request, ACTION_BODIES[name], without_action(data))
    idempotency = idempotency_of(request, data, cause, mapped=True, parsed=parsed)
    if name == "quarantine":
        result = services.quarantine.quarantine(
            vm_uuid.lower(), parsed.reason, cause=cause, if_match=if_match,
            idempotency=idempotency, behaviour=behaviour_of(request),
            owner_uuid=query.owner_uuid)
    else:
        result = services.quarantine.release(
            vm_uuid.lower(), cause=cause, if_match=if_match, idempotency=idempotency,
            behaviour=behaviour_of(request), owner_uuid=query.owner_uuid)
    vm = services.vms.render(services.commands.load(result.vm_uuid, version=result.version))
    return JSONResponse(vm, headers=versioned_headers(vm["version"], result.position))
