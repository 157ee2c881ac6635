"""CreateVm's body as its route reads it: the fields validated and ``networks`` resolved to
NIC requests (``add_nics``' too), every problem of either told at once."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from domain.errors import ValidationError
from service.api.deps import parse_body, read_your_writes, services_of
from service.api.errors import ApiError, invalid_parameters
from service.api.network_params import parse_networks
from service.api.schemas import CreateVmRequest
from service.commands.networks import NicRequest


async def create_request(request: Request, data: dict[str, Any] | None, *, message: str
                         ) -> tuple[CreateVmRequest, list[NicRequest]]:
    """CreateVm's body validated and its ``networks`` read (names resolved), every problem
    of both reported at once, as docs/vmapi-compatibility.md promises: a bad ``networks``
    was told only once every other field was valid (a tester). Raises ``ValidationFailed``
    under ``message`` (VMAPI's ``Invalid VM parameters``)."""
    try:
        spec_in = parse_body(request, CreateVmRequest, data, message=message)
    except ApiError as refusal:
        given = data.get("networks") if isinstance(data, dict) else None
        errors = refusal.extra.get("errors") or []
        if given is not None and not any(_names_networks(e.get("field")) for e in errors):
            refusal.extra["errors"] = [*errors, *await _networks_errors(request, given)]
        raise
    try:
        networks = (await run_in_threadpool(nic_requests, request, spec_in.networks)
                    if spec_in.networks is not None else [])
    except ValidationError as error:
        raise invalid_parameters(request, error.errors, message=message) from None
    return spec_in, networks


def _names_networks(field: Any) -> bool:
    """Whether an error names ``networks`` or a part of it (``networks.0``): a value of a
    type the model refused, which ``parse_networks`` is not to read."""
    return isinstance(field, str) and field.split(".")[0] == "networks"


async def _networks_errors(request: Request, networks: Any) -> list[dict[str, str]]:
    """The errors of ``networks`` (a body's, of a type the body's model takes), none if
    it is good."""
    try:
        await run_in_threadpool(nic_requests, request, networks)
    except ValidationError as error:
        return list(error.errors)
    return []


def nic_requests(request: Request, networks: Any) -> list[NicRequest]:
    """CreateVm's and ``add_nics``' ``networks`` as NIC requests (``parse_networks``). A
    network named by its name waits for ``network_view`` (``UnavailableError`` saying nothing
    was appended when the projector lags); one named by uuid waits for nothing."""
    if networks is None:
        return []
    services = services_of(request)

    def by_name(name: str) -> list[dict[str, Any]]:
        # network_view is the only index of networks by name: a name waits for it (the
        # projector must be up), before anything is appended; a network given by uuid is
        # the aggregate's to find, and its addresses are claimed on its stream
        read_your_writes(request, services, ("network_view",), eventual=False, deciding=True)
        return services.networks.by_name(name)

    return parse_networks(networks, by_name)
