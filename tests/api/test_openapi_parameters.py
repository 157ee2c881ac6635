"""Every route's schema declares the query parameters its parsing accepts, from the one
declaration both use (``service.api.query_parameters``; docs/api.md, "OpenAPI schema"). The
schema used to leave out most of them, required ones included (PUT /vms' ``server_uuid``,
``/stats/durations``' ``from`` and ``to``, every ``?action=``), so generated clients and
Swagger's "Try it out" could not call those operations (found by a tester)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from service import console
from service.api.app import api_routers, create_app
from service.api.deps import if_match_of
from service.api.query_parameters import COMMAND_HEADERS, Param, QueryParameters
from service.settings import Settings
from tests.api.helpers import create_running_vm

SERVICE = Path(__file__).resolve().parents[2] / "service"
UUID = "8f0e3d2c-1b4a-4c5d-9e6f-7a8b9c0d1e2f"
# Taken only to be refused in words of their own (ListVms' Moray filters, and a bare tag
# or internal_metadata without its .K): never declared
REFUSED_BY_NAME = {"predicate", "query", "tag", "internal_metadata"}


def _routes(settings: Settings) -> list[APIRoute]:
    # This FastAPI keeps included routers nested (app.routes lists them, not their routes):
    # walked router by router, as create_app includes them (tests/api/test_route_order.py)
    return [route for router in (*api_routers(settings), *console.ROUTERS)
            for route in router.routes
            if isinstance(route, APIRoute) and route.include_in_schema]


def _query(operation: dict) -> dict[str, dict]:
    return {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}


def test_every_route_declares_exactly_the_query_parameters_its_parsing_accepts() -> None:
    settings = Settings()
    schema = create_app(settings).openapi()
    routes = _routes(settings)
    assert len(routes) > 40
    for route in routes:
        declared = route.openapi_extra
        assert isinstance(declared, QueryParameters), (
            f"{route.path}: declare its query with openapi_extra=QueryParameters(...)")
        assert declared.undeclared <= REFUSED_BY_NAME, route.path
        assert declared.names == declared.declared | declared.undeclared
        operations = schema["paths"][route.path]
        methods = {m.lower() for m in route.methods} | (
            {"head"} if "GET" in route.methods and route.path != "/changes" else set())
        for method in methods:
            parameters = _query(operations[method])
            assert set(parameters) == declared.declared, (method, route.path)
            for name, parameter in parameters.items():
                assert parameter["description"] and parameter["schema"].get("type"), (
                    method, route.path, name)
    paths = schema["paths"]
    # what the tester found missing
    assert _query(paths["/vms"]["put"])["server_uuid"]["required"] is True
    assert {n for n, p in _query(paths["/stats/durations"]["get"]).items()
            if p["required"]} == {"from", "to"}
    acting = _query(paths["/vms/{vm_uuid}"]["post"])
    assert {"action", "sync", "idempotent", "owner_uuid", "timeout", "signal", "origin",
            "creator_uuid"} <= set(acting)
    assert acting["action"]["required"] is False  # it may be in the body instead
    assert "remove_nics" in acting["action"]["schema"]["enum"]
    for acted_on in ("/servers/{server_uuid}", "/volumes/{volume_uuid}"):  # or in the body
        assert _query(paths[acted_on]["post"])["action"]["required"] is False, acted_on
    assert _query(paths["/sim/servers/{server_uuid}"]["post"])["action"]["required"] is True
    assert set(_query(paths["/stats/failures"]["get"])["by"]["schema"]["enum"]) == {
        "reason", "server"}
    assert "timeout" in _query(paths["/jobs/{job_uuid}/wait"]["get"])
    assert "Last-Event-ID" in {p["name"] for p in paths["/changes"]["get"]["parameters"]}


def test_no_route_builds_its_query_but_from_its_declaration() -> None:
    """``QueryParameters.parse`` is the one way to a ``Query``: a route that built one from
    a set of names could take parameters its schema does not show."""
    built = re.compile(r"\bQuery\(request")
    offenders = [str(path.relative_to(SERVICE)) for path in SERVICE.rglob("*.py")
                 if path.name != "query_parameters.py" and built.search(path.read_text())]
    assert offenders == []


def test_a_route_parsing_by_a_declaration_not_its_own_is_refused() -> None:
    own = QueryParameters(Param("a", "a"))
    other = QueryParameters(Param("b", "b"))
    union = own | other
    app = FastAPI()

    @app.get("/own", openapi_extra=own)
    def by_own(request: Request) -> dict:
        return {"names": sorted(own.parse(request).request.query_params)}

    @app.get("/part", openapi_extra=union)
    def by_part(request: Request) -> dict:
        other.parse(request).check()
        return {}

    @app.get("/other", openapi_extra=own)
    def by_other(request: Request) -> dict:
        other.parse(request)
        return {}

    http = TestClient(app, raise_server_exceptions=True)
    assert http.get("/own", params={"a": "1"}).status_code == 200
    assert http.get("/part", params={"b": "1"}).status_code == 200
    with pytest.raises(RuntimeError, match="parses a query it does not declare"):
        http.get("/other")
    assert union.declared == {"a", "b", "consistency", "owner_uuid"}


# The commands: each reads If-Match and Idempotency-Key (deps.if_match_of, idempotency_of)
COMMANDS = {("post", "/vms"), ("post", "/vms/{vm_uuid}"), ("delete", "/vms/{vm_uuid}"),
            ("post", "/volumes"), ("post", "/volumes/{volume_uuid}"), ("post", "/servers"),
            ("post", "/servers/{server_uuid}"), ("post", "/networks")}
VM_COMMANDS = {("post", "/vms"), ("post", "/vms/{vm_uuid}"), ("delete", "/vms/{vm_uuid}")}
# The agents' reports read If-Match; an Idempotency-Key they get is recorded in the cause, not
# checked (their generation or last_modified orders them: docs/api.md, "Idempotency")
REPORTS = {("put", "/vms"), ("put", "/vms/{vm_uuid}")}


def test_every_operation_declares_the_request_headers_it_reads() -> None:
    """Generated clients and Swagger's "Try it out" send only the headers the schema
    declares: Accept-Version, x-api-version and x-request-id on every operation, If-Match and
    Idempotency-Key on every command (the agents' reports If-Match alone), x-context on the
    VM commands (none were declared)."""
    schema = create_app(Settings()).openapi()
    seen = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            headers = {p["name"]: p for p in operation.get("parameters", [])
                       if p["in"] == "header"}
            assert {"Accept-Version", "x-api-version", "x-request-id"} <= set(headers), (
                method, path)
            command = {"If-Match", "Idempotency-Key"} & set(headers)
            assert command == ({"If-Match", "Idempotency-Key"} if (method, path) in COMMANDS
                               else {"If-Match"} if (method, path) in REPORTS
                               else set()), (method, path)
            assert ("x-context" in headers) == ((method, path) in VM_COMMANDS), (method, path)
            assert all(h["description"] and not h["required"] for h in headers.values())
            seen.add((method, path))
    assert COMMANDS | REPORTS <= seen


def test_a_route_reading_a_command_header_it_does_not_declare_is_refused() -> None:
    app = FastAPI()

    @app.post("/declared", openapi_extra=QueryParameters(*COMMAND_HEADERS))
    def declared(request: Request) -> dict:
        return {"version": if_match_of(request)}

    @app.post("/undeclared", openapi_extra=QueryParameters())
    def undeclared(request: Request) -> dict:
        return {"version": if_match_of(request)}

    http = TestClient(app, raise_server_exceptions=True)
    assert http.post("/declared", headers={"If-Match": '"3"'}).json() == {"version": 3}
    with pytest.raises(RuntimeError, match="reads the header If-Match it does not declare"):
        http.post("/undeclared")


def _value(parameter: dict) -> str:
    """A value of the parameter's declared type (the route may still refuse it: a marker)."""
    declared = parameter["schema"]
    if "enum" in declared:
        return declared["enum"][0]
    if declared.get("format") == "uuid":
        return UUID
    if declared.get("format") == "date-time":
        return "2026-01-01T00:00:00Z"
    return {"integer": str(declared.get("minimum", 0)), "boolean": "true"}.get(
        declared["type"], "a")


def _errors(answer) -> list[dict]:
    if not answer.headers.get("content-type", "").startswith("application/json"):
        return []  # HTML fragments, Prometheus text: not a refusal
    body = answer.json()
    return body.get("errors", []) if isinstance(body, dict) else []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_each_route_takes_each_declared_parameter_and_refuses_another(client) -> None:
    vm_uuid = create_running_vm(client)
    schema = client.get("/openapi.json").json()
    unknown = {"field": "nonesuch", "code": "Invalid", "message": "Invalid parameter"}
    ignoring = 0
    for path, operations in schema["paths"].items():
        if path == "/changes":
            continue  # a stream that never ends; its parsing: tests/changes/
        url = re.sub(r"\{[a-z_]+\}", UUID, path.replace("{vm_uuid}", vm_uuid))
        for method, operation in operations.items():
            if method == "head":
                continue  # run as its GET (service/api/head.py)
            declared = _query(operation)
            # the required ones with each request: a missing one may be refused first
            required = {name: _value(p) for name, p in declared.items() if p["required"]}
            answer = client.request(method.upper(), url, params={**required, "nonesuch": "1"})
            assert answer.status_code < 500, (method, path, answer.text)
            errors = _errors(answer)
            # a route declaring nothing reads no query (QueryParameters.ignored)
            assert (unknown in errors) is bool(declared), (method, path, answer.text)
            ignoring += not declared
            # a parameter some actions only take (kill's signal) is tried with each
            actions = [{}, *({"action": a} for a in declared.get("action", {}).get(
                "schema", {}).get("enum", ()))]
            for name, parameter in declared.items():
                for action in actions:
                    answer = client.request(method.upper(), url, params={
                        **required, **action, name: _value(parameter)})
                    assert answer.status_code < 500, (method, path, name, answer.text)
                    if {**unknown, "field": name} not in _errors(answer):
                        break
                else:
                    raise AssertionError(f"{method} {path} refuses its {name}: {answer.text}")
    assert ignoring == 5  # /ping, /metrics, /sim/faults (POST, DELETE), /sim/latency
