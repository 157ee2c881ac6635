"""VM commands: CreateVm, the actions (``POST /vms/{uuid}?action=``) and DeleteVm. Each turns
its request into one call of ``Commands`` (``create_vm``, ``request_action``, ``change_nics``,
or the quarantine's) and answers 202 with the job; the reads are ``service.api.routes_vms``.

The routes are ``async``: CreateVm, the lifecycle and NIC actions and DeleteVm hand their
command to the committer's thread and await it (``deps.command``), with no thread-pool hop;
what waits for a read model (the networks a create or ``add_nics`` names, the quarantine
actions, which answer with the VM as it now is) runs in the thread pool, and ``sync=true``
awaits the job with short checks there (``job_waits``)."""

from __future__ import annotations

from typing import Any

from fastapi import Body, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from domain import json_input
from domain.alias_hold import DuplicateAliasError
from domain.errors import ValidationError
from domain.states import Action
from service.api.action_params import action_of, check_agree, with_query
from service.api.auth import authorize_action, authorized_router, require_owner
from service.api.create_vm_body import create_request, nic_requests
from service.api.deps import (
    behaviour_of,
    cause_of,
    command,
    idempotency_of,
    if_match_of,
    parse_body,
    services_of,
)
from service.api.errors import invalid_parameters
from service.api.headers import MAX_X_CONTEXT_BYTES, stored_header, versioned_headers
from service.api.job_waits import answer_command
from service.api.params import Query
from service.api.quarantine_actions import quarantine_action
from service.api.query_parameters import check_declared_header
from service.api.schemas import (
    ONLY_SIGKILL,
    AddNicsBody,
    CreateVmRequest,
    DeleteVmBody,
    UpdateVmRequest,
    is_kill_signal,
)
from service.api.vm_actions import (
    ACT_ON_VM,
    ACTION_BODIES,
    ADD_NICS_QUERY,
    CREATE_VM,
    DELETE_VM,
    KILL_QUERY,
    LIFECYCLE_QUERY,
    NIC_ACTIONS,
    NIC_LISTS,
    QUARANTINE_ACTIONS,
    REMOVE_NICS_QUERY,
)
from service.commands.application import VmSpec
from service.commands.networks import NicRequest
from service.commands.nic_actions import change_nics

router = authorized_router()

ACTIONS = {a.value: a for a in (Action.START, Action.STOP, Action.KILL, Action.REBOOT,
                                Action.UPDATE)}
UPDATABLE = ("alias", "customer_metadata", "internal_metadata", "tags")
# VMAPI's top-level messages of bad CreateVm and UpdateVm input, and of add_nics' networks
# (lib/common/validation.js: validateNetworks; remove_nics' macs are validateMacs', an update's)
CREATE_MESSAGE, UPDATE_MESSAGE = "Invalid VM parameters", "Invalid VM update parameters"
NETWORKS_MESSAGE = "Invalid network parameters"


@router.post("/vms", status_code=202, openapi_extra=CREATE_VM)
async def create_vm(request: Request, data: dict[str, Any] | None = Body(None)  # noqa: B008
                    ) -> JSONResponse:
    """CreateVm: records the VM and queues its provision job (``sync``, in the query or the
    body: answered once the provision ended; VMAPI createVm refuses a ``sync`` that is not a
    boolean, naming it). ``owner_uuid`` and ``networks`` may be in the query too."""
    query = CREATE_VM.parse(request)
    sync = query.boolean("sync")
    query.check()
    # checked as every command's is; a VM not yet created has no version for it to match
    if_match_of(request)
    spec_in, networks = await create_request(
        request, with_query(request, data, ("owner_uuid", "networks")), message=CREATE_MESSAGE)
    check_agree(request, spec_in)  # owner_uuid, sync, networks in both places: one value
    require_owner(request, str(spec_in.owner_uuid))
    try:
        return await _create(request, spec_in, networks, data,
                             sync=sync or bool(spec_in.sync))
    except ValidationError as error:  # volumes, networks' addresses: VMAPI's top-level text
        raise invalid_parameters(request, error.errors, message=CREATE_MESSAGE) from None


async def _create(request: Request, spec_in: CreateVmRequest, networks: list[NicRequest],
                  data: dict[str, Any] | None, *, sync: bool) -> JSONResponse:
    spec = VmSpec(
        owner_uuid=str(spec_in.owner_uuid),
        brand=spec_in.brand,
        ram=spec_in.ram,
        alias=spec_in.alias,
        image_uuid=str(spec_in.image_uuid) if spec_in.image_uuid else None,
        cpu_cap=spec_in.cpu_cap,
        persistence=spec_in.persistence,
        customer_metadata=spec_in.customer_metadata or {},
        internal_metadata=spec_in.internal_metadata or {},
        tags=spec_in.tags or {},
        server_uuid=str(spec_in.server_uuid) if spec_in.server_uuid else None,
        volumes=[{"volume_uuid": str(m.volume_uuid), "mountpoint": m.mountpoint}
                 for m in spec_in.volumes],
        networks=tuple(networks),
    )
    services = services_of(request)
    cause, vm_uuid = cause_of(request), str(spec_in.uuid) if spec_in.uuid else None
    # mapped: ?sync=1 and {"sync": true} (?owner_uuid=, ?networks=) are one request
    idempotency = idempotency_of(request, data, cause, mapped=True, parsed=spec_in,
                                 defaults=CreateVmRequest)
    context = _x_context(request)
    result = await command(request, lambda: services.commands.create_vm(
        spec, cause=cause, vm_uuid=vm_uuid, idempotency=idempotency, context=context))
    return await answer_command(request, result, sync=sync)


@router.post("/vms/{vm_uuid}", openapi_extra=ACT_ON_VM)
async def act_on_vm(vm_uuid: str, request: Request,
                    data: dict[str, Any] | None = Body(None)) -> Response:  # noqa: B008
    """VM actions: ``?action=start|stop|kill|reboot|update`` (202 with the job);
    ``quarantine|release`` (operator; 200 with the VM). The action and its parameters may be
    in the query or the body, as VMAPI maps both (``action_params``)."""
    name = action_of(request, data)
    if name != request.query_params.get("action"):  # authorize checked the query's
        authorize_action(request, name)  # the body's narrows the roles as the query's does
    if name in QUARANTINE_ACTIONS:
        return await run_in_threadpool(quarantine_action, vm_uuid, request, data, name)
    if name in NIC_ACTIONS:
        return await _nic_action(vm_uuid, request, data, name)
    # kill's signal may be in the query or the body; each is checked, and only SIGKILL is
    # taken, so the two cannot disagree
    killing = name == Action.KILL.value
    query = (KILL_QUERY if killing else LIFECYCLE_QUERY).parse(request)
    signal = query.params.get("signal")
    if killing and signal is not None and not is_kill_signal(signal):
        query.invalid("signal", ONLY_SIGKILL)
    idempotent = query.boolean("idempotent")
    sync = query.boolean("sync")
    _client_extras(query)
    query.integer("timeout", minimum=0)  # stopVm/rebootVm's grace period: nothing to wait for
    action = ACTIONS.get(name or "")
    if action is None:
        every = (*ACTIONS, *QUARANTINE_ACTIONS, *NIC_ACTIONS)
        query.invalid("action", f"must be one of {', '.join(every)}",
                      code="Missing" if name is None else "Invalid")
    query.check()
    assert action is not None
    parsed = parse_body(request, ACTION_BODIES[action.value], data,
                        message=UPDATE_MESSAGE if action is Action.UPDATE else None)
    check_agree(request, parsed)
    args: dict[str, Any] = {}
    if isinstance(parsed, UpdateVmRequest):
        args = _update_args(parsed)
    owner_uuid = query.owner_uuid or (
        str(parsed.owner_uuid) if parsed.owner_uuid else None)
    return await _request(request, vm_uuid, action, args=args, owner_uuid=owner_uuid,
                          idempotent=idempotent or bool(parsed.idempotent),
                          sync=sync or bool(parsed.sync), context=parsed.context, body=data,
                          parsed=parsed)


def _update_args(parsed: UpdateVmRequest) -> dict[str, Any]:
    """The fields an update changes: those the body names. ``null`` clears one: ``alias``
    becomes null, a metadata object or ``tags`` becomes ``{}`` (docs/api.md, "Commands")."""
    given = parsed.model_dump(include=set(UPDATABLE), exclude_unset=True)
    return {name: {} if value is None and name != "alias" else value
            for name, value in given.items()}


@router.delete("/vms/{vm_uuid}", openapi_extra=DELETE_VM)
async def delete_vm(vm_uuid: str, request: Request,
                    data: dict[str, Any] | None = Body(None)) -> Response:  # noqa: B008
    """DeleteVm (api.md, "DeleteVm and actions: version 1 vs version 2"). Its parameters may
    be in the query or the body, as an action's (``DeleteVmBody``)."""
    query = DELETE_VM.parse(request)
    sync = query.boolean("sync")
    _client_extras(query)
    query.check()
    parsed = parse_body(request, DeleteVmBody, data)
    check_agree(request, parsed)
    owner_uuid = query.owner_uuid or (str(parsed.owner_uuid) if parsed.owner_uuid else None)
    return await _request(request, vm_uuid, Action.DESTROY, args={}, owner_uuid=owner_uuid,
                          idempotent=False, sync=sync or bool(parsed.sync),
                          context=parsed.context, body=data, parsed=parsed)


async def _nic_action(vm_uuid: str, request: Request, data: dict[str, Any] | None,
                      name: str) -> JSONResponse:
    """``add_nics`` (``networks``) and ``remove_nics`` (``macs``), as VMAPI has them, each
    list in the body or the query; their context (``x-context``, or the body's) is kept in
    the job's ``params.context``, as the other actions keep it. Every refusal of the body
    carries VMAPI's top-level text, whichever check refused it (the parse, the networks'
    lookup, the VM's NICs or the networks' addresses): ``Invalid network parameters`` for
    ``networks`` (its ``validateNetworks``), ``Invalid VM update parameters`` for ``macs``
    (its ``validateMacs``)."""
    query = (ADD_NICS_QUERY if name == "add_nics" else REMOVE_NICS_QUERY).parse(request)
    sync = query.boolean("sync")
    _client_extras(query)
    query.check()
    message = UPDATE_MESSAGE if name == "remove_nics" else NETWORKS_MESSAGE
    parsed = parse_body(request, ACTION_BODIES[name], with_query(request, data, NIC_LISTS[name]),
                        message=message)
    check_agree(request, parsed)
    services = services_of(request)
    try:
        add = (await run_in_threadpool(nic_requests, request, parsed.networks)
               if isinstance(parsed, AddNicsBody) else None)
    except ValidationError as error:
        raise invalid_parameters(request, error.errors, message=message) from None
    remove = None if isinstance(parsed, AddNicsBody) else [m.lower() for m in parsed.macs]
    behaviour, cause, if_match = behaviour_of(request), cause_of(request), if_match_of(request)
    owner_uuid = query.owner_uuid or (str(parsed.owner_uuid) if parsed.owner_uuid else None)
    idempotency = idempotency_of(request, data, cause, mapped=True, parsed=parsed)
    context = _one_context(request, parsed.context)
    try:
        result = await command(request, lambda: change_nics(
            services.commands, vm_uuid.lower(), behaviour=behaviour, cause=cause, add=add,
            remove=remove, owner_uuid=owner_uuid, if_match=if_match, idempotency=idempotency,
            context=context))
    except ValidationError as error:  # an address taken, a network full, a MAC not the VM's
        raise invalid_parameters(request, error.errors, message=message) from None
    return await answer_command(request, result, sync=sync or bool(parsed.sync))


def _client_extras(query: Query) -> None:
    # Sent by the VMAPI client on actions and DeleteVm when its caller gives them (cloudapi
    # always does); validated, then not recorded (docs/vmapi-compatibility.md).
    query.text("origin")
    query.uuid("creator_uuid")


async def _request(request: Request, vm_uuid: str, action: Action, *, args: dict[str, Any],
                   owner_uuid: str | None, idempotent: bool, sync: bool,
                   context: dict[str, Any] | None, body: Any, parsed: BaseModel) -> Response:
    """Request ``action``; ``body`` is the request's and ``parsed`` its validated model, for
    its ``Idempotency-Key``'s fingerprint (its action's parameters counted as the query's,
    ``asked_params``; an update's fields keep their ``null``, which clears them)."""
    services = services_of(request)
    cause = cause_of(request)
    idempotency = idempotency_of(request, body, cause, mapped=True, parsed=parsed,
                                 kept_null=UPDATABLE if action is Action.UPDATE else ())
    context = _one_context(request, context)
    behaviour, if_match = behaviour_of(request), if_match_of(request)
    try:
        result = await command(request, lambda: services.commands.request_action(
            vm_uuid.lower(), action,
            behaviour=behaviour,
            cause=cause,
            args=args,
            context=context,
            idempotent=idempotent,
            if_match=if_match,
            owner_uuid=owner_uuid.lower() if owner_uuid else None,
            idempotency=idempotency,
        ))
    except DuplicateAliasError as error:  # an update's alias taken: VMAPI's top-level text
        raise invalid_parameters(request, error.errors, message=UPDATE_MESSAGE) from None
    if result.job_uuid is None:
        # Destroyed at once, with no job (v2 DeleteVm of a VM whose server was removed).
        return Response(status_code=204,
                        headers=versioned_headers(result.version, result.position))
    return await answer_command(request, result, sync=sync)


def _one_context(request: Request, in_body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The action's context: its body's ``context`` or its ``x-context`` header, each checked
    wherever given (a bad header is refused even beside a body's context, which it used to
    pass unread); both given and different, ``ConflictingParameters`` naming ``x-context``:
    neither silently wins (VMAPI reads only the header)."""
    in_header = _x_context(request)
    if in_body is not None and in_header is not None and in_body != in_header:
        message = "x-context in the header and context in the body differ"
        raise invalid_parameters(request, [{"field": "x-context", "code": "Invalid",
                                            "message": message}],
                                 code="ConflictingParameters", message=message)
    return in_body if in_body is not None else in_header


def _x_context(request: Request) -> dict[str, Any] | None:
    check_declared_header(request, "x-context")
    header = stored_header(request, "x-context")
    if header is None:
        return None
    if len(header.encode()) > MAX_X_CONTEXT_BYTES:
        raise invalid_parameters(request, [{"field": "x-context", "code": "Invalid",
                                            "message": f"at most {MAX_X_CONTEXT_BYTES} bytes"}])
    try:
        value = json_input.loads(header)
    except json_input.JsonInputError as error:
        if error.too_deep or isinstance(error, json_input.RepeatedKeyError):
            # kept raw, a header too deep to parse would be stored but never read back; one
            # giving a key twice is JSON whose meaning would be a guess, as a body's
            raise invalid_parameters(request, [{"field": "x-context", "code": "Invalid",
                                                "message": f"not valid JSON ({error})"}]) from None
        value = {"raw": header}  # kept as sent, where VMAPI drops it
    context = value if isinstance(value, dict) else {"value": value}
    problem = json_input.at_field(json_input.unstorable(context, "x-context"), "x-context")
    if problem:
        raise invalid_parameters(request, [{"field": "x-context", "code": "Invalid",
                                            "message": problem}])
    return context
