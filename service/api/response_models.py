"""The shapes of the API's answers, for the OpenAPI schema only (``service/api/openapi.py``):
routes answer plain dicts, so these models describe them and validate nothing at run time.
Objects allow fields beyond those listed (``extra="allow"``), so a field added later breaks no
generated client; the listed ones are what clients may rely on (docs/api.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, create_model


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FieldError(_Open):
    """One refusal of a validation error: the ``field`` it names, or, for parameters that
    cannot go together, the ``fields`` (VMAPI's ConflictingParameters item)."""

    field: str | None = None
    fields: list[str] | None = None
    code: str  # Missing | Invalid | Duplicate | ConflictingParameters
    message: str


class Error(_Open):
    """Every error body: ``code`` and ``message``; a validation error adds ``errors`` (at most
    100; ``errors_omitted`` counts the rest), a refusal because of state adds ``state`` and
    ``allowed_actions``, a 412 ``current_version`` (and ``pending_job_uuid`` when an update's
    version matched but an update job was pending: docs/api.md)."""

    code: str
    message: str
    errors: list[FieldError] | None = None
    errors_omitted: int | None = None


class Accepted(_Open):
    """An accepted command (VMAPI): the VM and the job that carries it out."""

    vm_uuid: str
    job_uuid: str


class MountedVolume(_Open):
    volume_uuid: str
    mountpoint: str
    address: str | None
    stale: bool


class Quarantine(_Open):
    reason: str
    since: str
    previous_owner_uuid: str | None


class Vm(_Open):
    """The VM object (GetVm)."""

    uuid: str
    alias: str | None
    owner_uuid: str
    server_uuid: str | None
    brand: str
    image_uuid: str | None
    ram: int
    cpu_cap: int | None
    state: str
    desired_state: str
    persistence: str | dict[str, str]  # a preset, or rows set one by one
    customer_metadata: dict[str, Any]
    internal_metadata: dict[str, Any]
    tags: dict[str, Any]
    volumes: list[MountedVolume]
    error: dict[str, Any] | None
    quarantine: Quarantine | None
    active_job_uuid: str | None
    queued_job_uuids: list[str]
    create_timestamp: str
    last_modified: str
    destroyed: str | None
    version: int


# ListVms' items: the VM object, or with ``fields=`` (VMAPI) only the fields asked for.
ListedVm = create_model(
    "ListedVm", __base__=_Open, __doc__="A VM of ListVms: every field of the VM object, or "
    "only those ``fields=`` names.",
    **{name: (field.annotation | None, None) for name, field in Vm.model_fields.items()})


class Job(_Open):
    """The job object (VMAPI's, as its client polls it)."""

    uuid: str
    name: str
    execution: str
    vm_uuid: str
    params: dict[str, Any]
    created_at: str
    started_at: str | None
    finished_at: str | None
    attempt: int
    error: Any
    chain_results: list[dict[str, Any]]


class HistoryEvent(_Open):
    """One event of a VM's stream; ``topic`` and ``chained`` are the inputs of its hash-chain
    link besides the previous one's, as hashed (docs/api.md, "Recomputing a link")."""

    version: int
    position: int
    timestamp: str
    type: str
    data: dict[str, Any]
    cause: dict[str, Any]
    topic: str
    chained: dict[str, Any]


class Ping(_Open):
    status: str
    healthy: bool
    pid: int
    pingErrors: dict[str, str]  # VMAPI's name
    backend: str
    head_position: int
    projection_lag: dict[str, int]
    projection_past_head: list[str]


class InventoryApplied(_Open):
    """``PUT /vms?server_uuid=``: what happened to each VM the report changed."""

    server_uuid: str
    generation: int
    changed: dict[str, str]
