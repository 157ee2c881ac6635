"""Server routes: compute nodes, their capacity, and the operator's record of host reboots and
removals (api.md, ``/servers``). A server answer's ``ETag`` is its version (its stream's, which
every claim of a VM placed there moves too), and the actions honour ``If-Match`` on it, as the
VM commands do on the VM's."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any, Literal

from fastapi import Body, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from domain.errors import ServerNotFoundError
from domain.server import Server
from projections.server_view import server_object
from service.api.action_params import BODY_ACTION, action_of
from service.api.auth import authorize_action, authorized_router
from service.api.deps import (
    cause_of, idempotency_of, if_match_of, parse_body, read_one, read_your_writes,
    services_of,
)
from service.api.errors import invalid_parameters
from service.api.headers import versioned_headers
from service.api.query_parameters import COMMAND_HEADERS, Param, QueryParameters, one_of
from service.api.schemas import StrictModel, Uuid

router = authorized_router(tags=["servers"])

NO_PARAMETERS = QueryParameters(scoped=False)
CREATE_SERVER = QueryParameters(*COMMAND_HEADERS, scoped=False)
ACTIONS = ("reboot", "remove")
SERVER_ACTION = QueryParameters(Param(
    "action", "reboot: record the host's reboot (body: its new boot_id); remove: record that "
    "it left the fleet (or the body's action)", one_of(ACTIONS)), *COMMAND_HEADERS, scoped=False)


class CreateServerRequest(StrictModel):
    """``POST /servers``: a compute node joining the fleet (RAM in MiB)."""

    uuid: Uuid | None = None
    hostname: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    ram_mib: int = Field(ge=1, le=64 * 1024 * 1024)
    cpus: int = Field(ge=1, le=4096)
    boot_id: str = Field(default_factory=lambda: str(uuidlib.uuid4()), min_length=1,
                         max_length=64)


class ServerActionRequest(StrictModel):
    """The body of a server action: the action, when the query has none, and for ``reboot``
    the boot id the host came back with (new if absent)."""

    action: Literal[ACTIONS] | None = Field(  # type: ignore[valid-type]
        None, description=BODY_ACTION)
    boot_id: str | None = Field(None, min_length=1, max_length=64)


@router.get("/servers", openapi_extra=NO_PARAMETERS)
def list_servers(request: Request) -> JSONResponse:
    """Every server with its allocated and free capacity and VM count."""
    services = services_of(request)
    query = NO_PARAMETERS.parse(request)
    query.check()
    read_your_writes(request, services, ("server_view",), eventual=query.eventual)
    return JSONResponse(services.servers.list())


@router.get("/servers/{server_uuid}", openapi_extra=NO_PARAMETERS)
def get_server(server_uuid: str, request: Request) -> JSONResponse:
    """One server with its allocated and free capacity and VM count; ``ETag``: its version."""
    query = NO_PARAMETERS.parse(request)
    query.check()
    return _server(request, server_uuid, eventual=query.eventual)


def _server(request: Request, server_uuid: str, *, eventual: bool) -> JSONResponse:
    """The server as ``server_view`` has it (once it reflects every command acknowledged
    before this request, unless ``eventual``), with its version as ``ETag``."""
    server = read_one(request, "server_view", services_of(request).servers.get, server_uuid,
                      ServerNotFoundError, eventual=eventual)
    return _answer(server)


def _changed(request: Request, server_uuid: str, *, status: int, position: int | None,
             headers: dict[str, str] | None = None) -> JSONResponse:
    """A server command's answer: the server as the log has it now, folded from its stream
    and rendered as ``server_view`` renders it (``server_object``), not read from the read
    model: a command whose change is recorded must not answer a read-timeout ``503`` after
    it (api.md, "Commands and the projector"). It still waits, at most
    ``VMLEDGER_READ_TIMEOUT_S`` and whatever comes of it, for ``server_view``: a later
    DeleteVm decides by the status it reads there (a VM whose servers were all removed is
    destroyed at once), so the removal it answers should be there when the projector is up.
    ``position``: the log position of the command's last event (None: nothing appended)."""
    services = services_of(request)
    services.projections.wait_for(services.commands.head_position(), ("server_view",),
                                  services.settings.read_timeout_s)
    server = services.commands.load_aggregate(Server, server_uuid.lower())
    return _answer(server_object(server), status=status, position=position, headers=headers)


def _answer(server: dict[str, Any], *, status: int = 200, position: int | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(server, status_code=status, headers={
        **versioned_headers(server["version"], position), **(headers or {})})


@router.post("/servers", status_code=201, openapi_extra=CREATE_SERVER)
def create_server(request: Request, data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """Record a compute node (201); an existing uuid with the same hostname, RAM and CPUs is
    200, with others ``ValidationFailed`` naming ``uuid`` (``Duplicate``), nothing recorded."""
    CREATE_SERVER.parse(request).check()
    if_match_of(request)  # checked as every command's is; a new server has no version yet
    asked = parse_body(request, CreateServerRequest, data)
    services, cause = services_of(request), cause_of(request)
    server_uuid, created, position = services.commands.register_server_keyed(
        str(asked.uuid or uuidlib.uuid4()), hostname=asked.hostname, boot_id=asked.boot_id,
        ram_mib=asked.ram_mib, cpus=asked.cpus, cause=cause,
        idempotency=idempotency_of(request, data, cause, parsed=asked,
                                   defaults=CreateServerRequest))
    services.projections.wake()
    return _changed(request, server_uuid, status=201 if created else 200, position=position,
                    headers={"Location": f"/servers/{server_uuid}"})


@router.post("/servers/{server_uuid}", openapi_extra=SERVER_ACTION)
def server_action(server_uuid: str, request: Request,
                  data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """Operator: ``?action=reboot`` records a host reboot (a new boot id: the VMs that ran
    there are gone, and each VM's persistence policy decides what follows); ``remove``
    records that the server left the fleet; the action may be in the body instead, as a VM
    action's (``action_params.action_of``). ``If-Match`` (the server's version) is honoured:
    another version is 412 and nothing is recorded."""
    query = SERVER_ACTION.parse(request)
    action = action_of(request, data)
    # operators' only today; an ACTION_ROLES entry would narrow the body's action too
    authorize_action(request, action)
    if action not in ACTIONS:
        query.invalid("action", "must be reboot or remove",
                      code="Missing" if action is None else "Invalid")
    query.check()
    services = services_of(request)
    cause, if_match = cause_of(request), if_match_of(request)
    body = parse_body(request, ServerActionRequest, data)
    if action == "remove" and body.boot_id is not None:
        # another action's field, refused as a VM action refuses one (``signal`` on a start):
        # a removal sent with a boot_id removed the server without a word (a tester)
        raise invalid_parameters(request, [{"field": "boot_id", "code": "Invalid",
                                            "message": "Invalid parameter"}])
    idempotency = idempotency_of(request, data, cause, mapped=True, parsed=body,
                                 defaults=ServerActionRequest)
    if action == "reboot":
        boot_id = body.boot_id or str(uuidlib.uuid4())
        position = services.agents.host_rebooted(
            server_uuid.lower(), boot_id, cause=cause, if_match=if_match,
            idempotency=idempotency).position
        status = 202
    else:
        position = services.commands.remove_server(
            server_uuid.lower(), cause=cause, if_match=if_match, idempotency=idempotency)
        status = 200
    return _changed(request, server_uuid, status=status, position=position)
