"""The request bodies of routes that read a ``dict`` body (``Body(None)``) and validate it
themselves (so a refusal is VMAPI-shaped), declared in the OpenAPI schema: clients and fuzzers
(tests/api/test_fuzz.py) see the real shapes. Declaring changes no behaviour."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from service.api import routes_agents, routes_servers, routes_sim, routes_volumes
from service.api.schemas import CreateVmRequest, UpdateVmRequest

# (method, path) → the model its JSON body is validated against
REQUEST_BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("post", "/vms"): CreateVmRequest,
    ("post", "/vms/{vm_uuid}"): UpdateVmRequest,  # the widest action body (update)
    ("put", "/vms/{vm_uuid}"): routes_agents.VmReport,
    ("put", "/vms"): routes_agents.InventoryReport,
    ("post", "/servers"): routes_servers.CreateServerRequest,
    ("post", "/servers/{server_uuid}"): routes_servers.ServerActionRequest,
    ("post", "/volumes"): routes_volumes.CreateVolumeRequest,
    ("post", "/sim/faults"): routes_sim.FaultRequest,
    ("put", "/sim/latency"): routes_sim.LatencyRequest,
}


def declare_request_bodies(app: FastAPI) -> None:
    """Make ``app.openapi()`` describe the bodies in ``REQUEST_BODIES``."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for (method, path), model in REQUEST_BODIES.items():
            operation = schema["paths"].get(path, {}).get(method)
            if operation is None:
                continue
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
            operation["requestBody"] = {"content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
