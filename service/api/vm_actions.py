"""What the VM commands take, declared once for their parsing and their schema: each action of
``POST /vms/{uuid}`` with its query parameters (``service.api.query_parameters``) and its body
model (``ACTION_BODIES``), and CreateVm's and DeleteVm's query.

The schema declares the action route's body as ``VmActionRequest``: every field any action's
body takes, each saying which actions take it, none other (each action's model refuses an
unknown field, so ``additionalProperties`` is false). It is built from ``ACTION_BODIES``, the
models the route validates by, so it cannot leave out a field an action takes; and each
action's example (``EXAMPLES``, shown by Swagger UI) is checked against both by
``tests/api/test_openapi_bodies.py``. Which fields go with which action is the action's
model's to say: the union cannot.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from service.api.action_params import BODY_ACTION
from service.api.query_parameters import (
    BOOLEAN,
    COMMAND_HEADERS,
    UUID,
    X_CONTEXT,
    Param,
    QueryParameters,
    integer,
    one_of,
    owner,
)
from service.api.schemas import (
    ActionBody,
    AddNicsBody,
    KillBody,
    RemoveNicsBody,
    StrictModel,
    UpdateVmRequest,
)

LIFECYCLE_ACTIONS = ("start", "stop", "kill", "reboot", "update")
QUARANTINE_ACTIONS = ("quarantine", "release")
NIC_ACTIONS = ("add_nics", "remove_nics")
EVERY_ACTION = (*LIFECYCLE_ACTIONS, *QUARANTINE_ACTIONS, *NIC_ACTIONS)


class QuarantineRequest(StrictModel):
    """Why the operator takes the VM."""

    reason: str = Field(min_length=1, max_length=1024)


#: The model each action's body is validated by (quarantine's and release's once their
#: ``action`` is taken out: ``action_params.without_action``).
ACTION_BODIES: dict[str, type[BaseModel]] = {
    "start": ActionBody, "stop": ActionBody, "kill": KillBody, "reboot": ActionBody,
    "update": UpdateVmRequest, "quarantine": QuarantineRequest, "release": StrictModel,
    "add_nics": AddNicsBody, "remove_nics": RemoveNicsBody,
}

# One line per field any action's body takes (a field without one stops the import)
_FIELDS = {
    "action": BODY_ACTION,
    "owner_uuid": "the VMAPI client's owner scoping: another owner's VM is not found",
    "idempotent": "true: a version 1 stop of a stopped VM (start of a running one, ...) "
                  "succeeds doing nothing, as version 2's does",
    "sync": "true: answer once the job has ended (at most 60 s); 409 JobFailed or "
            "JobCanceled if it ended so",
    "context": "kept in the job's params.context (as the x-context header is)",
    "timeout": "stop's and reboot's grace period, in seconds (validated, not used)",
    "origin": "the VMAPI client's caller (validated, not recorded)",
    "creator_uuid": "the user the VMAPI client acts for (validated, not recorded)",
    "alias": "the new alias (null removes it)",
    "customer_metadata": "replaces the customer metadata whole (null empties it)",
    "internal_metadata": "replaces the internal metadata whole (null empties it)",
    "tags": "replace the tags whole (null empties them)",
    "networks": "the networks to add a NIC on: uuids, {uuid, primary, ip}, {ipv4_uuid, "
                "ipv4_ips | ipv4_count}, {name}, or one comma-separated string",
    "macs": "the MACs of the NICs to remove: an array, or one comma-separated string",
    "signal": "only SIGKILL: SIGKILL, KILL or 9 (any case; text or a number)",
    "reason": "why the operator takes the VM",
}


def _union() -> type[BaseModel]:
    """``VmActionRequest``: each field of ``ACTION_BODIES``' models, optional, described with
    the actions that take it; ``action`` one of ``EVERY_ACTION``."""
    takers: dict[str, list[str]] = defaultdict(list)
    infos: dict[str, FieldInfo] = {}
    for action, model in ACTION_BODIES.items():
        for name, info in model.model_fields.items():
            takers[name].append(action)
            infos.setdefault(name, info)
    takers["action"] = list(EVERY_ACTION)  # quarantine's and release's too (taken out first)
    fields: dict[str, Any] = {}
    for name, info in infos.items():
        described = FieldInfo.merge_field_infos(
            info, default=None, default_factory=None,
            description=f"{_FIELDS[name]}; taken by {', '.join(takers[name])}")
        fields[name] = (info.annotation | None, described)
    fields["action"] = (Literal[EVERY_ACTION] | None,  # type: ignore[valid-type]
                        Field(None, description=_FIELDS["action"]))
    return create_model("VmActionRequest", __config__=ConfigDict(extra="forbid"),
                        __doc__="The body of POST /vms/{uuid}: the fields of every action's "
                        "body (which action takes each is said); the action, if not in the "
                        "query.", **fields)


VmActionRequest = _union()

_EXAMPLE_NETWORK = "8f0e3d2c-1b4a-4c5d-9e6f-7a8b9c0d1e2f"
#: One body per action, as docs/api.md has them (declared as the body's examples)
EXAMPLES: dict[str, dict[str, Any]] = {
    "start": {"action": "start", "idempotent": True},
    "stop": {"action": "stop", "timeout": 30},
    "kill": {"action": "kill", "signal": "SIGKILL"},
    "reboot": {"action": "reboot"},
    "update": {"action": "update", "alias": "web-1", "tags": {"role": "web"},
               "customer_metadata": None},
    "quarantine": {"action": "quarantine", "reason": "suspected compromise"},
    "release": {"action": "release"},
    "add_nics": {"action": "add_nics", "networks": [{"uuid": _EXAMPLE_NETWORK,
                                                     "primary": False}]},
    "remove_nics": {"action": "remove_nics", "macs": ["90:b8:d0:1f:2e:3d"]},
}

# The query: every action's parameters may be in the query or the body (action_params)
_OWNER = owner("another owner's VM is not found")
_ACTION = Param("action", "the action (or the body's action)", one_of(EVERY_ACTION))


def _client_params(job: str) -> tuple[Param, ...]:
    """``sync``, ``origin`` and ``creator_uuid`` of the commands making a ``job``."""
    return (Param("sync", f"true or 1: answer once the job has ended (at most 60 s; {job}); "
                  "409 JobFailed or JobCanceled if it ended so", BOOLEAN),
            Param("origin", f"the VMAPI client's caller (validated, not recorded; {job})",
                  {"type": "string", "minLength": 1, "maxLength": 256}),
            Param("creator_uuid", "the user the VMAPI client acts for (validated, not "
                  f"recorded; {job})", UUID))


# quarantine and release make no job, so take none of these
_ACTIONS_CLIENT = _client_params("not quarantine or release")
LIFECYCLE_QUERY = QueryParameters(
    _ACTION,
    Param("idempotent", "true or 1: a version 1 stop of a stopped VM (start of a running "
          "one, ...) succeeds doing nothing (start, stop, kill, reboot, update)", BOOLEAN),
    *_ACTIONS_CLIENT,
    Param("timeout", "stop's and reboot's grace period, in seconds (validated, not used; "
          "start, stop, kill, reboot, update)", integer(0)),
    _OWNER)
KILL_QUERY = QueryParameters(
    *LIFECYCLE_QUERY.params,
    Param("signal", "kill's signal: only SIGKILL (SIGKILL, KILL or 9, any case)",
          one_of(("SIGKILL", "KILL", "9"))))
#: The lists VMAPI takes in the query as in the body (action_params.LISTS)
_NETWORKS = "comma-separated network uuids or names (as the body's networks; given in both, " \
    "they must agree)"
ADD_NICS_QUERY = QueryParameters(
    _ACTION, Param("networks", f"add_nics' networks: {_NETWORKS}"), *_ACTIONS_CLIENT, _OWNER)
REMOVE_NICS_QUERY = QueryParameters(
    _ACTION, Param("macs", "remove_nics' MACs, comma-separated (as the body's macs; given in "
                   "both, they must agree)"), *_ACTIONS_CLIENT, _OWNER)
#: Which list each NIC action takes, in the query or the body
NIC_LISTS = {"add_nics": ("networks",), "remove_nics": ("macs",)}
QUARANTINE_QUERY = QueryParameters(_ACTION, _OWNER)
#: What ``POST /vms/{uuid}`` declares: each action's parameters (the route parses by its own)
_VM_COMMAND_HEADERS = (*COMMAND_HEADERS, X_CONTEXT)
ACT_ON_VM = (KILL_QUERY | LIFECYCLE_QUERY | ADD_NICS_QUERY | REMOVE_NICS_QUERY | QUARANTINE_QUERY
             | QueryParameters(*_VM_COMMAND_HEADERS, common=False))
#: CreateVm's owner: in the query or the body, as restify's mapParams takes it (both given,
#: they must agree), scoped as the body's (an owner token creates for its own owner only)
_CREATE_OWNER = Param("owner_uuid", "the VM's owner, as the body's owner_uuid (given in both, "
                      "they must agree; an owner's token creates VMs for its own owner only)",
                      UUID)
CREATE_VM = QueryParameters(_client_params("the provision")[0], _CREATE_OWNER,
                            Param("networks", f"the VM's networks: {_NETWORKS}"),
                            *_VM_COMMAND_HEADERS)
DELETE_VM = QueryParameters(*_client_params("the destroy"), _OWNER, *_VM_COMMAND_HEADERS)
