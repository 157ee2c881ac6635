"""The OpenAPI schema tells the truth (docs/api.md, "OpenAPI schema"): every operation declares
its answers (``service.api.openapi.declare``), /metrics is Prometheus text, and the check every
test client runs (tests/api/conformance.py) fails for an answer the schema does not describe."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.api import openapi
from service.api.app import create_app
from service.api.response_models import Ping
from service.container import Services
from service.settings import Settings
from tests.api.conformance import SchemaMismatch, conforming


def _operations(schema: dict) -> set[tuple[str, str]]:
    return {(method, path) for path, ops in schema["paths"].items() for method in ops}


def test_every_operation_declares_its_answers_with_their_bodies() -> None:
    schema = create_app(Settings()).openapi()
    assert _operations(schema) == set(openapi.RESPONSES)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert {"400", "401", "403", "503"} <= set(responses), (method, path)
            for status, declared in responses.items():
                if method == "head" or status == "204":
                    assert "content" not in declared, (method, path, status)
                else:
                    assert declared["content"], (method, path, status)
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    vm = schema["paths"]["/vms/{vm_uuid}"]
    assert set(vm["post"]["responses"]) >= {"200", "202", "404", "409", "412", "422"}
    assert set(vm["delete"]["responses"]) >= {"202", "204", "404", "409", "412", "422"}
    assert vm["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Vm"}


def test_metrics_are_declared_and_answered_as_prometheus_text(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert list(schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == [
        "text/plain"]
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")


def test_the_conformance_check_fails_for_an_answer_the_schema_does_not_declare(
        services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(openapi.RESPONSES, ("get", "/ping"), {201: Ping})
    app = create_app(services=services, background=False)
    with conforming(TestClient(app)) as http, pytest.raises(SchemaMismatch, match="200"):
        http.get("/ping")
