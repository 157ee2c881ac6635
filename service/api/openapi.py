"""The OpenAPI schema told the truth (docs/api.md, "OpenAPI schema"): generated clients are
built from it, so every operation declares every status it answers, each with its body.

- ``REQUEST_BODIES``: the bodies of routes that read a ``dict`` body (``Body(None)``) and
  validate it themselves (so a refusal is VMAPI-shaped): one model, or any of several where
  the body's form decides (``anyOf``), with ``REQUEST_EXAMPLES``.
- The query parameters are each route's ``openapi_extra``, the declaration its parsing
  accepts by (service/api/query_parameters.py).
- ``RESPONSES``: every operation's answers, registered with ``declare`` (routes added later
  call it too; ``tests/api/test_openapi.py`` fails for an operation without a declaration,
  and ``tests/api/test_fuzz.py`` checks every response it sees against the schema). A HEAD
  the envelope runs as its GET (service/api/head.py) is not declared: the schema derives it
  from the GET's operation and answers.

Routes answer plain ``JSONResponse``s, so declaring changes no behaviour.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from service.api import routes_agents, routes_networks, routes_servers, routes_sim, routes_volumes
from service.api.response_models import (
    Accepted, Error, HistoryEvent, InventoryApplied, Job, ListedVm, Ping, Vm,
)
from service.api.head import STREAMS
from service.api.query_parameters import EVERY_OPERATION_HEADERS
from service.api.schemas import CreateVmRequest, DeleteVmBody
from service.api.vm_actions import EXAMPLES, VmActionRequest

# (method, path) → the model its JSON body is validated against, or the models one of which
# it is (the route tells them apart: a PutVm body's generation, a volume action's ?action=)
REQUEST_BODIES: dict[tuple[str, str], type[BaseModel] | tuple[type[BaseModel], ...]] = {
    ("post", "/vms"): CreateVmRequest,
    ("post", "/vms/{vm_uuid}"): VmActionRequest,  # every action's fields (vm_actions.py)
    ("delete", "/vms/{vm_uuid}"): DeleteVmBody,
    ("put", "/vms/{vm_uuid}"): (routes_agents.VmReport, routes_agents.AgentVmBody),
    ("put", "/vms"): routes_agents.InventoryReport,
    ("post", "/servers"): routes_servers.CreateServerRequest,
    ("post", "/servers/{server_uuid}"): routes_servers.ServerActionRequest,
    ("post", "/volumes"): routes_volumes.CreateVolumeRequest,
    ("post", "/volumes/{volume_uuid}"): (routes_volumes.AttachNetworkRequest,
                                         routes_volumes.DetachNetworkRequest),
    ("post", "/networks"): routes_networks.CreateNetworkRequest,
    ("post", "/sim/faults"): routes_sim.FaultRequest,
    ("put", "/sim/latency"): routes_sim.LatencyRequest,
}
# (method, path) → its body's examples, by name (Swagger UI offers each)
REQUEST_EXAMPLES: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("post", "/vms/{vm_uuid}"): {action: {"summary": f"?action={action}", "value": body}
                                 for action, body in EXAMPLES.items()},
}


@dataclass(frozen=True)
class Media:
    """A body that is not one of our JSON models: its media type and JSON schema (``{}``:
    any value of that type)."""

    media_type: str
    schema: dict[str, Any]


JSON = Media("application/json", {})            # some JSON value (an object or array)
TEXT = Media("text/plain", {"type": "string"})
HTML = Media("text/html", {"type": "string"})             # the console's fragments
EVENTS = Media("text/event-stream", {"type": "string"})   # Server-Sent Events
METRICS = Media(CONTENT_TYPE_LATEST.split(";")[0], {"type": "string"})  # Prometheus text
NO_BODY = None
# One model, a list of one model ([Vm]: an array of VMs), a Media, or NO_BODY.
Answer = type[BaseModel] | list[type[BaseModel]] | Media | None

# Every operation can answer these (docs/api.md, "Errors"): 400 a bad Accept-Version; 401/403
# tokens and roles; 409 (v1) / 422 (v2) bad query or body; 413 a body over the limit;
# 503 the database or the read models.
COMMON_ERRORS = (400, 401, 403, 409, 413, 422, 503)
# And every operation of a method whose body is read: 415 a body sent with a Content-Encoding.
BODY_ERRORS = {"post": (415,), "put": (415,), "delete": (415,), "patch": (415,)}

RESPONSES: dict[tuple[str, str], dict[int, Answer]] = {}
# (method, path) → {header: description} required on the operation's success answers
HEADERS: dict[tuple[str, str], dict[str, str]] = {}


def declare(method: str, path: str, answers: dict[int, Answer], *,
            errors: Iterable[int] = (), headers: dict[str, str] | None = None) -> None:
    """Register what ``method path`` answers: its success ``answers`` ({status: body}), the
    error statuses it has beyond ``COMMON_ERRORS`` (each with the ``Error`` body), and the
    headers every success answer carries. Call it at import time of the routes' module."""
    key = (method.lower(), path)
    error_body = NO_BODY if key[0] == "head" else Error  # a HEAD answer never has a body
    RESPONSES[key] = {**answers, **{status: error_body for status in (
        *COMMON_ERRORS, *BODY_ERRORS.get(key[0], ()), *errors)}}
    if headers:
        HEADERS[key] = headers


_COUNT = {"x-joyent-resource-count": "the number of matches, whatever the page"}
_VM_ERRORS = (404,)
_COMMAND_ERRORS = (404, 412)

declare("get", "/ping", {200: Ping})
declare("get", "/metrics", {200: METRICS})
declare("get", "/vms", {200: [ListedVm]}, headers=_COUNT)
declare("head", "/vms", {200: NO_BODY}, headers=_COUNT)
declare("post", "/vms", {202: Accepted}, errors=(404,))
declare("put", "/vms", {200: InventoryApplied}, errors=_COMMAND_ERRORS)
declare("get", "/vms/{vm_uuid}", {200: Vm}, errors=_VM_ERRORS)
declare("post", "/vms/{vm_uuid}", {202: Accepted, 200: Vm}, errors=_COMMAND_ERRORS)
declare("delete", "/vms/{vm_uuid}", {202: Accepted, 204: NO_BODY}, errors=_COMMAND_ERRORS)
declare("put", "/vms/{vm_uuid}", {200: Vm}, errors=_COMMAND_ERRORS)
declare("get", "/vms/{vm_uuid}/history", {200: [HistoryEvent]}, errors=_VM_ERRORS)
declare("get", "/vms/{vm_uuid}/jobs", {200: [Job]}, errors=_VM_ERRORS)
declare("get", "/jobs", {200: [Job]})
declare("get", "/jobs/{job_uuid}", {200: Job}, errors=(404,))
declare("get", "/jobs/{job_uuid}/wait", {200: Job}, errors=(404,))
declare("get", "/servers", {200: JSON})
declare("post", "/servers", {201: JSON, 200: JSON})
declare("get", "/servers/{server_uuid}", {200: JSON}, errors=(404,))
declare("post", "/servers/{server_uuid}", {202: JSON, 200: JSON}, errors=_COMMAND_ERRORS)
for _stats in ("states", "transitions", "durations", "failures", "stuck"):
    declare("get", f"/stats/{_stats}", {200: JSON})
declare("get", "/volumes", {200: JSON}, headers=_COUNT)
declare("post", "/volumes", {201: JSON})
declare("get", "/volumes/{volume_uuid}", {200: JSON}, errors=(404,))
declare("post", "/volumes/{volume_uuid}", {202: JSON}, errors=(404, 412))
declare("get", "/networks", {200: JSON})
declare("post", "/networks", {201: JSON})
declare("get", "/networks/{network_uuid}", {200: JSON}, errors=(404,))
declare("get", "/changes", {200: EVENTS})
declare("get", "/changefeeds", {200: JSON})
declare("get", "/changefeeds/stats", {200: JSON})
for _fragment in ("session", "fleet", "fleet/chart", "servers", "audit"):
    declare("get", f"/console/fragments/{_fragment}", {200: HTML})
declare("post", "/console/fragments/audit", {200: HTML}, errors=(404,))  # an unknown vm_uuid
for _fragment in ("", "/state", "/diff"):
    declare("get", f"/console/fragments/vms/{{vm_uuid}}{_fragment}", {200: HTML}, errors=(404,))
declare("get", "/sim", {200: JSON})
declare("post", "/sim/faults", {200: JSON})
declare("delete", "/sim/faults", {200: JSON})
declare("put", "/sim/latency", {200: JSON})
declare("post", "/sim/workers", {200: JSON})
declare("post", "/sim/servers/{server_uuid}", {200: JSON}, errors=(404,))
declare("post", "/sim/vms/{vm_uuid}", {200: JSON}, errors=(404,))


@functools.cache
def _json_schema(model: type[BaseModel]) -> dict[str, Any]:
    # Pydantic builds a model's schema anew on every call, and a schema names most models
    # many times (Error under every operation): built once a process, each app's copied.
    return model.model_json_schema(ref_template="#/components/schemas/{model}")


def _ref(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    """``model``'s schema added to ``components``; a ``$ref`` to it."""
    schema = copy.deepcopy(_json_schema(model))
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _response(status: int, answer: Answer, headers: dict[str, str],
              components: dict[str, Any]) -> dict[str, Any]:
    declared: dict[str, Any] = {"description": HTTPStatus(status).phrase}
    if isinstance(answer, Media):
        declared["content"] = {answer.media_type: {"schema": answer.schema}}
    elif isinstance(answer, list):
        declared["content"] = {"application/json": {"schema": {
            "type": "array", "items": _ref(answer[0], components)}}}
    elif answer is not None:
        declared["content"] = {"application/json": {"schema": _ref(answer, components)}}
    if headers and status < 300:
        declared["headers"] = {name: {"description": text, "required": True,
                                      "schema": {"type": "string"}}
                               for name, text in headers.items()}
    return declared


def declare_schema(app: FastAPI) -> None:
    """Make ``app.openapi()`` describe the bodies in ``REQUEST_BODIES`` (with
    ``REQUEST_EXAMPLES``) and the answers in ``RESPONSES`` (an operation without a
    declaration keeps FastAPI's guess); the query parameters are the routes' own."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for (method, path), model in REQUEST_BODIES.items():
            operation = schema["paths"].get(path, {}).get(method)
            if operation is not None:
                body: dict[str, Any] = {"schema": _ref(model, components) if isinstance(
                    model, type) else {"anyOf": [_ref(one, components) for one in model]}}
                if (method, path) in REQUEST_EXAMPLES:
                    body["examples"] = copy.deepcopy(REQUEST_EXAMPLES[(method, path)])
                operation["requestBody"] = {"content": {"application/json": body}}
        every = [header.openapi() for header in EVERY_OPERATION_HEADERS]
        for operations in schema["paths"].values():
            for operation in operations.values():
                operation["parameters"] = [*operation.get("parameters", []),
                                           *copy.deepcopy(every)]
        heads = [path for path, operations in schema["paths"].items()
                 if _declare_head_of_get(path, operations)]
        for (method, path), answers in RESPONSES.items():
            operation = schema["paths"].get(path, {}).get(method)
            if operation is not None:
                headers = HEADERS.get((method, path), {})
                operation["responses"] = {
                    str(status): _response(status, answer, headers, components)
                    for status, answer in sorted(answers.items())}
        for path in heads:  # the GET's statuses and headers, no body
            get = RESPONSES.get(("get", path))
            if get is not None:
                headers = HEADERS.get(("get", path), {})
                schema["paths"][path]["head"]["responses"] = {
                    str(status): _response(status, NO_BODY, headers, components)
                    for status in sorted(get)}
        # Bearer tokens (docs/operations.md, "Tokens and roles"), or none where the service
        # runs without tokens; Swagger UI's "Authorize" button fills the header from this
        schema["components"]["securitySchemes"] = {
            "bearerToken": {"type": "http", "scheme": "bearer"}}
        schema["security"] = [{"bearerToken": []}, {}]
        for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422, never sent
            if not _referenced(schema, name):
                components.pop(name, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _declare_head_of_get(path: str, operations: dict[str, Any]) -> bool:
    """Add to ``path``'s ``operations`` the HEAD its GET route answers (the envelope runs a
    HEAD as its GET: service/api/head.py), when the path has a GET, is not an endless
    stream (``STREAMS``) and has no HEAD route of its own (HEAD /vms, CountVms, declares
    its answers itself): the GET's parameters, its own operation id. Whether it was added;
    its answers are the GET's, set from ``RESPONSES``."""
    get = operations.get("get")
    if get is None or "head" in operations or path in STREAMS:
        return False
    head = copy.deepcopy(get)
    head["operationId"] = f"{get['operationId'].removesuffix('_get')}_head"
    head["summary"] = f"{get.get('summary', '')} (HEAD)".strip()
    head["description"] = "As GET, without the body (RFC 9110, 9.3.2)."
    operations["head"] = head
    return True


def _referenced(schema: dict[str, Any], name: str) -> bool:
    import json

    return f'"#/components/schemas/{name}"' in json.dumps(schema)
