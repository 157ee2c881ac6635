"""Volume routes: volumes, the networks they are reachable on and their address on each (api.md,
``/volumes``; design.md, lesson 6)."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Annotated, Any, Literal

from fastapi import Body, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, Field

from domain.errors import VolumeNotFoundError
from domain.volume import ADDRESS_TEXT, MAX_NETWORKS, Volume
from projections.volume_mounts import volume_object
from service.api.action_params import BODY_ACTION, action_of
from service.api.auth import authorize_action, authorized_router
from service.api.deps import (
    cause_of, idempotency_of, if_match_of, parse_body, read_one, read_your_writes, services_of,
)
from service.api.headers import versioned_headers
from service.api.params import MAX_LIMIT
from service.api.query_parameters import (
    COMMAND_HEADERS, LIMIT, OFFSET, Param, QueryParameters, one_of)
from service.api.schemas import Name, StrictModel, Uuid

router = authorized_router(tags=["volumes"])

ACTIONS = ("attach_network", "detach_network")
NO_PARAMETERS = QueryParameters(scoped=False)
CREATE_VOLUME = QueryParameters(*COMMAND_HEADERS, scoped=False)
LIST_VOLUMES = QueryParameters(LIMIT, OFFSET, scoped=False)
VOLUME_ACTION = QueryParameters(Param(
    "action", "attach_network (body: network_uuid, address) or detach_network (body: "
    "network_uuid); or the body's action", one_of(ACTIONS)), *COMMAND_HEADERS, scoped=False)


def _volume_address(text: str) -> str:
    """``text`` as a volume address in its normal form; ``ValueError`` unless it is an IPv4
    or IPv6 address with no zone id (``domain.volume.volume_address``). Only a string is
    given here: pydantic refuses any other JSON value first (a number was read as an
    address: 16909060 as 1.2.3.4, ``true`` as 0.0.0.1)."""
    try:
        address = ip_address(text)
    except ValueError:
        raise ValueError(ADDRESS_TEXT) from None
    if getattr(address, "scope_id", None) is not None:
        raise ValueError(ADDRESS_TEXT)
    return str(address)


# An address a VM can mount, given as a string
VolumeAddress = Annotated[str, AfterValidator(_volume_address)]


class CreateVolumeRequest(StrictModel):
    """``POST /volumes``: a name, and the networks it is reachable on with its address on each
    (``{network_uuid: address}``; none by default)."""

    uuid: Uuid | None = None
    name: Name
    networks: dict[Uuid, VolumeAddress] = Field(default_factory=dict, max_length=MAX_NETWORKS)


class AttachNetworkRequest(StrictModel):
    """``?action=attach_network``: the network, and the volume's address on it."""

    action: Literal["attach_network"] | None = Field(None, description=BODY_ACTION)
    network_uuid: Uuid
    address: VolumeAddress


class DetachNetworkRequest(StrictModel):
    """``?action=detach_network``: the network the volume leaves."""

    action: Literal["detach_network"] | None = Field(None, description=BODY_ACTION)
    network_uuid: Uuid


def _volume(volume: Volume, *, status: int, position: int | None) -> JSONResponse:
    """A volume command's answer: the volume as the command left it (the saved aggregate),
    rendered as ``volume_mounts`` renders it (``volume_object``), not read from the read
    model: a command whose change is recorded must not wait for the projector, nor answer a
    read-timeout ``503`` after it (api.md, "Commands and the projector")."""
    body = volume_object(volume)
    return JSONResponse(body, status_code=status, headers={
        **versioned_headers(body["version"], position), "Location": f"/volumes/{body['uuid']}"})


@router.get("/volumes", openapi_extra=LIST_VOLUMES)
def list_volumes(request: Request) -> JSONResponse:
    """ListVolumes: oldest first, paged by ``limit`` and ``offset``; the total in
    x-joyent-resource-count."""
    services = services_of(request)
    query = LIST_VOLUMES.parse(request)
    limit = query.integer("limit", minimum=1, maximum=MAX_LIMIT) or MAX_LIMIT
    offset = query.integer("offset", minimum=0) or 0
    query.check()
    read_your_writes(request, services, ("volume_mounts",), eventual=query.eventual)
    volumes, total = services.volumes.list(limit=limit, offset=offset)
    return JSONResponse(volumes, headers={"x-joyent-resource-count": str(total)})


@router.get("/volumes/{volume_uuid}", openapi_extra=NO_PARAMETERS)
def get_volume(volume_uuid: str, request: Request) -> JSONResponse:
    """GetVolume: its networks, its address on each, and the address VMs mount."""
    query = NO_PARAMETERS.parse(request)
    query.check()
    volume = read_one(request, "volume_mounts", services_of(request).volumes.get, volume_uuid,
                      VolumeNotFoundError, eventual=query.eventual)
    return JSONResponse(volume, headers=versioned_headers(volume["version"]))


@router.post("/volumes", status_code=201, openapi_extra=CREATE_VOLUME)
def create_volume(request: Request, data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """CreateVolume (201): a volume on the given networks."""
    CREATE_VOLUME.parse(request).check()
    if_match_of(request)  # checked as every command's is; a new volume has no version yet
    asked = parse_body(request, CreateVolumeRequest, data)
    services, cause = services_of(request), cause_of(request)
    volume, position = services.commands.create_volume(
        name=asked.name, cause=cause, volume_uuid=str(asked.uuid) if asked.uuid else None,
        networks={str(network): str(address) for network, address in asked.networks.items()},
        idempotency=idempotency_of(request, data, cause, parsed=asked,
                                   defaults=CreateVolumeRequest),
    )
    return _volume(volume, status=201, position=position)


@router.post("/volumes/{volume_uuid}", openapi_extra=VOLUME_ACTION)
def volume_action(volume_uuid: str, request: Request,
                  data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """``?action=attach_network`` (body ``{network_uuid, address}``) or ``detach_network``
    (body ``{network_uuid}``), 202 with the volume: the VMs mounting it keep the addresses
    they booted with until they boot again (``GET /vms?stale_mounts=true``). A repeat
    changes nothing. The action may be in the body instead, as a VM action's
    (``action_params.action_of``). ``If-Match`` (the volume's version) is honoured: 412
    otherwise."""
    query = VOLUME_ACTION.parse(request)
    action = action_of(request, data)
    # operators' only today; an ACTION_ROLES entry would narrow the body's action too
    authorize_action(request, action)
    if action not in ACTIONS:
        query.invalid("action", f"must be one of {', '.join(ACTIONS)}",
                      code="Missing" if action is None else "Invalid")
    query.check()
    services = services_of(request)
    cause, if_match = cause_of(request), if_match_of(request)
    if action == "attach_network":
        attach = parse_body(request, AttachNetworkRequest, data)
        volume, position = services.commands.attach_network(
            volume_uuid.lower(), str(attach.network_uuid), str(attach.address), cause=cause,
            if_match=if_match,
            idempotency=idempotency_of(request, data, cause, mapped=True, parsed=attach,
                                       defaults=AttachNetworkRequest))
    else:
        detach = parse_body(request, DetachNetworkRequest, data)
        volume, position = services.commands.detach_network(
            volume_uuid.lower(), str(detach.network_uuid), cause=cause, if_match=if_match,
            idempotency=idempotency_of(request, data, cause, mapped=True, parsed=detach,
                                       defaults=DetachNetworkRequest))
    return _volume(volume, status=202, position=position)
