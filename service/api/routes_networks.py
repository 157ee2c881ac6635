"""Network routes: the networks vmledger hands NIC addresses out of (api.md ``/networks``):
``POST /networks`` (a subnet and a provisioning range), ``GET /networks``,
``GET /networks/{uuid}``, each with the addresses in use and free."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from domain.json_input import cut
from projections.network_view import network_object
from service.api.auth import authorized_router
from service.api.deps import (
    cause_of, idempotency_of, if_match_of, parse_body, read_one, read_your_writes,
    services_of,
)
from service.api.errors import ApiError
from service.api.headers import versioned_headers
from service.api.query_parameters import COMMAND_HEADERS, Param, QueryParameters
from service.api.schemas import Name, StrictModel, Uuid
from service.api.vmapi_fields import refused_as

router = authorized_router(tags=["networks"])

NO_PARAMETERS = QueryParameters(scoped=False)
CREATE_NETWORK = QueryParameters(*COMMAND_HEADERS, scoped=False)
LIST_NETWORKS = QueryParameters(Param("name", "only the networks of this name",
                                      {"type": "string", "minLength": 1, "maxLength": 256}),
                                scoped=False)


# An address field, refused in words of what it must be whatever is wrong with it
IPV4_ADDRESS = Annotated[str, Field(min_length=7, max_length=15),
                         refused_as("must be an IPv4 address")]


class CreateNetworkRequest(StrictModel):
    """``POST /networks``: a name, an IPv4 subnet (CIDR), the provisioning range (inclusive)
    and an optional gateway outside it."""

    uuid: Uuid | None = None
    name: Name
    subnet: Annotated[str, Field(min_length=9, max_length=18),
                      refused_as("must be an IPv4 CIDR, e.g. 10.0.0.0/24")]
    provision_start_ip: IPV4_ADDRESS
    provision_end_ip: IPV4_ADDRESS
    gateway: IPV4_ADDRESS | None = None


def _network(request: Request, network_uuid: str) -> dict[str, Any]:
    """The network once ``network_view`` reflects every command acknowledged before this
    request (404 ``ResourceNotFound``)."""
    return read_one(request, "network_view", services_of(request).networks.get, network_uuid,
                    lambda uuid: ApiError(404, "ResourceNotFound", f"Network {cut(uuid)} not found"),
                    eventual=False)


@router.post("/networks", status_code=201, openapi_extra=CREATE_NETWORK)
def create_network(request: Request, data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """Record a network; 201 with the network object and ``Location``: the network as the
    command left it, rendered as ``network_view`` renders it (``network_object``), not read
    from the read model, so the answer never waits for the projector (api.md, "Commands and
    the projector")."""
    CREATE_NETWORK.parse(request).check()
    if_match_of(request)  # checked as every command's is; a new network has no version yet
    asked = parse_body(request, CreateNetworkRequest, data)
    services, cause = services_of(request), cause_of(request)
    network, position = services.commands.create_network(
        name=asked.name, subnet=asked.subnet, provision_start_ip=asked.provision_start_ip,
        provision_end_ip=asked.provision_end_ip, gateway=asked.gateway,
        network_uuid=str(asked.uuid) if asked.uuid else None, cause=cause,
        idempotency=idempotency_of(request, data, cause, parsed=asked,
                                   defaults=CreateNetworkRequest))
    body = network_object(network)
    return JSONResponse(body, status_code=201, headers={
        **versioned_headers(body["version"], position), "Location": f"/networks/{network.id}"})


@router.get("/networks", openapi_extra=LIST_NETWORKS)
def list_networks(request: Request) -> JSONResponse:
    """Every network, oldest first (``?name=`` selects by name)."""
    query = LIST_NETWORKS.parse(request)
    name = query.text("name")
    query.check()
    services = services_of(request)
    read_your_writes(request, services, ("network_view",), eventual=query.eventual)
    found = services.networks.by_name(name) if name else services.networks.list()
    return JSONResponse(found, headers={"x-joyent-resource-count": str(len(found))})


@router.get("/networks/{network_uuid}", openapi_extra=NO_PARAMETERS)
def get_network(network_uuid: str, request: Request) -> JSONResponse:
    """One network, with ``addresses_in_use`` and ``addresses_free``; ``ETag``: its version."""
    NO_PARAMETERS.parse(request).check()
    network = _network(request, network_uuid)
    return JSONResponse(network, headers=versioned_headers(network["version"]))
