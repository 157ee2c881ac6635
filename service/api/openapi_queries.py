"""The query parameters of the list routes, as the OpenAPI document declares them (docs/api.md,
"Endpoints"). The routes parse their query themselves, so that a refusal is VMAPI's, word for
word (``service.api.list_vms_params``, ``service.api.params``); declaring a parameter here
changes no parsing, and ``tests/api/test_openapi.py`` checks each declared name is one the
route accepts.

ListVms' ``tag.K=V`` and ``internal_metadata.K=V`` are named by their key, which no OpenAPI
parameter can be, so the route's description (its docstring) tells of them; ``predicate``
and ``query`` (Moray's filters) are accepted only to be refused, and are not declared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.states import Execution, JobName
from projections.vm_queries import SORT_FIELDS
from service.api.list_vms_params import STATES, UNRECORDED
from service.api.vmapi_rules import ALIAS_RE
from service.api.params import MAX_INTEGER, MAX_LIMIT, openapi_parameter as parameter
from service.api.schemas import VMAPI_BRANDS

_UUID = {"type": "string", "format": "uuid"}
_BOOLEAN = {"type": "boolean"}


def _integer(minimum: int, maximum: int = MAX_INTEGER) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def _one_of(values: Iterable[str]) -> dict[str, Any]:
    return {"type": "string", "enum": sorted(values)}


# Accepted by every route (service.api.params.COMMON); owner_uuid is declared where it selects
_CONSISTENCY = parameter(
    "consistency", "eventual: answer without waiting for the read models to reach this "
    "client's last write (default: strong)", _one_of(("strong", "eventual")))


def _owner(description: str) -> dict[str, Any]:
    return parameter("owner_uuid", f"{description} (an owner's token is always scoped to its "
                     "own)", _UUID)


_OWNERS_VM = _owner("a VM of another owner is not found")
_LIMIT = parameter("limit", f"at most this many (default and maximum {MAX_LIMIT})",
                   _integer(1, MAX_LIMIT))
_OFFSET = parameter("offset", "skip this many matches first", _integer(0))

LIST_VMS = [
    _CONSISTENCY,
    _owner("only VMs of this owner"),
    parameter("uuid", "only the VM with this uuid", _UUID),
    parameter("uuids", "only these VMs (comma-separated uuids)"),
    parameter("server_uuid", "only VMs on this server", _UUID),
    parameter("image_uuid", "only VMs of this image", _UUID),
    parameter("state", "a state, or active (not destroyed and not failed)", _one_of(STATES)),
    parameter("brand", "only VMs of this brand", _one_of(VMAPI_BRANDS)),
    parameter("alias", "only VMs with this alias", {"type": "string",
                                                    "pattern": f"^{ALIAS_RE.pattern}$"}),
    parameter("ram", "only VMs with this much memory, in MiB (any digits, as VMAPI: one past "
              "every VM's memory matches none)", {"type": "integer", "minimum": 0}),
    parameter("docker", "only Docker VMs (true) or only the others (false)", _BOOLEAN),
    parameter("create_timestamp", "only VMs created at this instant: milliseconds since "
              "the epoch, or ISO 8601"),
    parameter("stale_mounts", "true: only VMs with a volume mount whose address is stale",
              _BOOLEAN),
    *(parameter(name, "accepted as VMAPI does; vmledger records none, so a value matches "
                "no VM", _UUID if name == "billing_id" else None) for name in UNRECORDED),
    _LIMIT,
    parameter("offset", "skip this many matches first (not with marker)", _integer(0)),
    parameter("marker", "where the page starts: the previous page's x-next-marker header, "
              "or VMAPI's JSON marker (not with offset)"),
    parameter("sort", "<field>[.asc|.desc] (case-insensitive) over "
              + ", ".join(SORT_FIELDS)),
    parameter("fields", "only these fields of each VM (comma-separated; * for all)"),
]
_JOB_FILTERS = [
    parameter("execution", "only jobs in this execution state",
              _one_of(e.value for e in Execution)),
    parameter("name", "only jobs of this name", _one_of(n.value for n in JobName)),
    _LIMIT, _OFFSET,
]
_TASK = parameter("task", "the same as name (VMAPI's word)", _one_of(n.value for n in JobName))

_NAME = {"type": "string", "minLength": 1, "maxLength": 256}
_OLDER_THAN = parameter("older_than", "only VMs in a transient state for this many seconds "
                        "or more (default: the service's stuck threshold)", _integer(0, 10**9))

# (method, path) → its query parameters, besides those FastAPI finds in the route's signature
QUERY_PARAMETERS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("get", "/vms"): LIST_VMS,
    ("head", "/vms"): LIST_VMS,
    ("get", "/jobs"): [_CONSISTENCY, _owner("only jobs of this owner's VMs"),
                       parameter("vm_uuid", "only this VM's jobs", _UUID), *_JOB_FILTERS,
                       _TASK],
    ("get", "/vms/{vm_uuid}/jobs"): [_CONSISTENCY, _OWNERS_VM, *_JOB_FILTERS, _TASK],
    ("get", "/vms/{vm_uuid}/history"): [
        _OWNERS_VM,
        parameter("after_version", "only events after this version of the VM", _integer(0)),
        _LIMIT],
    ("get", "/volumes"): [_CONSISTENCY, _LIMIT, _OFFSET],
    ("get", "/networks"): [_CONSISTENCY, parameter("name", "only the network of this name",
                                                   _NAME)],
    ("get", "/stats/stuck"): [_CONSISTENCY, _owner("only this owner's VMs"), _OLDER_THAN,
                              _LIMIT],
}
