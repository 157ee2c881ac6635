"""Compute agents' reports (api.md ``PUT /vms/{uuid}`` and ``PUT /vms?server_uuid=``): what
they observe, with a monotonically increasing ``generation``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import Body, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, ConfigDict, Field

from domain.errors import VmNotFoundError
from domain.vm import Vm
from service.api.auth import AGENT, authorized_router, principal_of, require_server
from service.api.deps import cause_of, if_match_of, parse_body, services_of
from service.api.errors import invalid_parameters
from service.api.headers import versioned_headers
from service.api.params import MAX_INTEGER
from service.api.query_parameters import IF_MATCH, UUID, Param, QueryParameters
from service.api.schemas import Alias, Brand, CpuCap, Instant, Metadata, Ram, StrictModel, Uuid
from service.commands.agents import Admit
from service.commands.vm_agent import AgentVm, AgentVmReports

router = authorized_router(tags=["agents"])

# A report is what a server saw, whoever owns the VMs: no owner_uuid scopes it (refused)
PUT_VM = QueryParameters(IF_MATCH, scoped=False)
PUT_VMS = QueryParameters(Param("server_uuid", "the server whose inventory this is", UUID,
                                required=True), IF_MATCH, scoped=False)

Observed = Literal["running", "stopped", "failed"]
#: What vm-agent may send as a VM's ``state``: the states vmadm gives a VM, and VMAPI's
#: ``destroyed``. Only ``Observed`` ones change a VM (service/commands/vm_agent.py); any other
#: string is refused, before the VM is looked up, as the generation form refuses it.
AgentState = Literal[
    "running", "stopped", "failed", "provisioning", "destroyed", "configured", "down",
    "incomplete", "installed", "ready", "receiving", "shutting_down", "stopping"]


#: How far ahead of the service's clock a vm-agent report's ``last_modified`` may be: servers'
#: clocks differ a little, but a report dated a day ahead would make every real report until
#: then "not newer" and so ignored (api.md, "Compute agents").
MAX_REPORT_AHEAD = timedelta(hours=1)


def _not_far_ahead(value: datetime) -> datetime:
    if value > datetime.now(UTC) + MAX_REPORT_AHEAD:
        raise ValueError("more than an hour ahead of the service's clock")
    return value


ReportedAt = Annotated[Instant, AfterValidator(_not_far_ahead)]


#: The node's sequence number a report is as of (service/jobs/compute/driver.py); optional, so
#: an agent that sends none is taken as before (api.md, "Compute agents").
NodeSeq = Annotated[int | None, Field(ge=0, le=MAX_INTEGER, strict=True)]


class VmReport(StrictModel):
    """``PUT /vms/{uuid}``: one VM as its server's agent sees it."""

    state: Observed
    server_uuid: Uuid
    boot_id: str = Field(min_length=1, max_length=64)
    generation: int = Field(ge=1, le=MAX_INTEGER, strict=True)  # true or "7" is no generation
    seq: NodeSeq = None


class ReportedVm(StrictModel):
    """One VM of an inventory."""

    state: Observed


class InventoryReport(StrictModel):
    """``PUT /vms?server_uuid=S``: every VM the agent knows, with its boot id and generation."""

    boot_id: str = Field(min_length=1, max_length=64)
    generation: int = Field(ge=1, le=MAX_INTEGER, strict=True)  # true or "7" is no generation
    seq: NodeSeq = None
    vms: dict[Uuid, ReportedVm] = Field(max_length=100_000)


class AgentVmBody(StrictModel):
    """``PUT /vms/{uuid}`` as vm-agent sends it: the whole VM object, no generation. Only the
    fields vmledger records are read; the VM object's others (``zone_state``, ``quota``, …)
    are not modelled (service/commands/vm_agent.py). Each field read has CreateVm's rule
    (service/api/schemas.py), so a report cannot record what CreateVm and update refuse;
    looser only where a VM found on a server may differ from one VMAPI creates (api.md
    "Compute agents"): any ``Brand``, a vmadm ``AgentState``, and no ram given."""

    model_config = ConfigDict(extra="ignore")

    uuid: Uuid | None = None
    state: AgentState
    server_uuid: Uuid | None = None
    last_modified: ReportedAt | None = None
    seq: NodeSeq = None  # not vm-agent's: an agent that numbers its node's happenings
    owner_uuid: Uuid | None = None
    alias: Alias | None = None
    brand: Brand | None = None
    ram: Ram | None = None
    max_physical_memory: Ram | None = None
    cpu_cap: CpuCap | None = None
    image_uuid: Uuid | None = None
    customer_metadata: Metadata = Field(default_factory=dict)
    internal_metadata: Metadata = Field(default_factory=dict)
    tags: Metadata = Field(default_factory=dict)

    def report(self) -> AgentVm:
        as_text = {name: str(getattr(self, name)) if getattr(self, name) else None
                   for name in ("server_uuid", "owner_uuid", "image_uuid")}
        return AgentVm(state=self.state, last_modified=self.last_modified, seq=self.seq,
                       alias=self.alias,
                       brand=self.brand, ram=self.ram if self.ram is not None
                       else self.max_physical_memory, cpu_cap=self.cpu_cap,
                       customer_metadata=self.customer_metadata,
                       internal_metadata=self.internal_metadata, tags=self.tags, **as_text)


@router.put("/vms/{vm_uuid}", openapi_extra=PUT_VM)
def put_vm(vm_uuid: str, request: Request, data: dict[str, Any] | None = Body(None)
           ) -> JSONResponse:
    """PutVm: apply one VM's observed state; answers the VM as the report left it (the
    aggregate its command saved, rendered as GetVm's read model renders it:
    ``VmQueries.render``). With a
    ``generation`` (vmledger's agents) the report is ordered by it; without one, as vm-agent
    sends VMAPI the whole VM object, by its ``last_modified``, and a VM the log never had is
    recorded as found, unless ``If-Match`` is sent (``*`` too: any version of a VM that
    exists): it names a version of a VM the log has, so such a VM is 404 as for every
    command. ``If-Match`` is the VM's version, checked
    after the agent's scope (an agent's VM of another server is 404 first); another version
    is 412 and nothing is appended (docs/api.md, "Compute agents")."""
    PUT_VM.parse(request).check()
    services = services_of(request)
    admit, if_match = _visible_to_reporter(request, vm_uuid), if_match_of(request)
    if isinstance(data, dict) and "generation" not in data:
        found = parse_body(request, AgentVmBody, data)
        if found.uuid is not None and str(found.uuid) != vm_uuid.lower():
            raise invalid_parameters(request, [{"field": "uuid", "code": "Invalid",
                                                "message": "differs from the path's uuid"}])
        report = found.report()
        require_server(request, report.server_uuid)
        changed = AgentVmReports(services.agents).put(
            vm_uuid.lower(), report, cause=cause_of(request), admit=admit, if_match=if_match)
        vm, position = changed.aggregate, changed.position
    else:
        generational = parse_body(request, VmReport, data)
        require_server(request, str(generational.server_uuid))
        vm, position = services.agents.report_vm(
            vm_uuid.lower(), server_uuid=str(generational.server_uuid),
            state=generational.state, boot_id=generational.boot_id,
            generation=generational.generation, cause=cause_of(request), admit=admit,
            seq=generational.seq, if_match=if_match)
    if vm is None:  # ``admit`` refuses a VM the log does not have first; for the type
        raise VmNotFoundError(vm_uuid)
    # the VM the report saved, not read from vm_view: a report's answer must not wait for the
    # projector, nor answer 503 after the report was recorded (api.md, "Commands and the
    # projector")
    body = services.vms.render(vm)
    return JSONResponse(body, headers=versioned_headers(body["version"], position))


def _visible_to_reporter(request: Request, vm_uuid: str) -> Admit:
    """The check a report's command makes of the VM it loaded (``Admit``): a VM the log
    never had is refused (``VmNotFoundError``; a vm-agent report records it as found before
    asking). An agent may name only a VM its own server holds (placed there, or claimed there
    by a provision under way): any other VM is refused with the same 404 and message as a VM
    the log never had, before anything is read into the answer or appended, so an agent token
    can neither read other servers' VMs nor learn which uuids exist. Operators may report for
    any VM."""
    principal = principal_of(request)

    def admit(vm: Vm | None) -> None:
        if vm is None:
            raise VmNotFoundError(vm_uuid)
        claimed = (vm.claim or {}).get("server_uuid")
        if principal.role == AGENT and principal.server_uuid not in (vm.server_uuid, claimed):
            raise VmNotFoundError(vm_uuid)

    return admit


@router.put("/vms", openapi_extra=PUT_VMS)
def put_vms(request: Request, data: dict[str, Any] | None = Body(None)) -> JSONResponse:
    """PutVms: apply the agent's whole inventory; answers what happened to each VM it
    changed (``{vm_uuid: happening}``), and its log position when it appended. ``If-Match``
    is the server's version (its ``ETag``): one header cannot name the version of each VM
    reported, and the server's stream is where the report is recorded, in one transaction
    with the VMs it changes; another version is 412 and nothing is appended."""
    query = PUT_VMS.parse(request)
    server_uuid = query.uuid("server_uuid")
    if server_uuid is None and "server_uuid" not in query.params:
        raise invalid_parameters(request, [{"field": "server_uuid", "code": "Missing",
                                            "message": "required"}])
    query.check()
    report = parse_body(request, InventoryReport, data)
    require_server(request, server_uuid)
    if_match = if_match_of(request)
    reported = services_of(request).agents.report_inventory(
        server_uuid, boot_id=report.boot_id, generation=report.generation,
        vms={str(uuid): vm.state for uuid, vm in report.vms.items()}, cause=cause_of(request),
        seq=report.seq, if_match=if_match)
    return JSONResponse({"server_uuid": server_uuid, "generation": report.generation,
                         "changed": reported.changed},
                        headers=versioned_headers(None, reported.position))
