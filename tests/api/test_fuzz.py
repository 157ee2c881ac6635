"""Fuzzing every operation of the OpenAPI schema with schemathesis, in-process over the ASGI app
on SQLite, bounded (a few examples per operation and mode): no 5xx but 503, a refused (4xx)
request appends nothing to the log, and every response conforms to the schema (its status is
declared, and its content type, body and required headers are those declared for it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance, response_headers_conformance, response_schema_conformance,
    status_code_conformance,
)

from service.api.app import create_app
from service.container import Services
from service.settings import Settings

MAX_EXAMPLES = 10
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance,
               response_headers_conformance]
# Every operation the schema lists (building the app connects to nothing), but endless event
# streams (GET /changes): a call never returns (tests/changes/ test it).
# Negative mode only where the schema declares something to make invalid: a request body
# (path parameters are unconstrained strings, and the declared query parameters are parsed by
# the routes, which refuse in VMAPI's words, not the schema's).
_SCHEMA = create_app(Settings()).openapi()["paths"]
OPERATIONS = sorted(
    (method.upper(), path, mode)
    for path, operations in _SCHEMA.items()
    for method, operation in operations.items()
    if "text/event-stream" not in operation.get("responses", {}).get("200", {}).get("content", {})
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or "requestBody" in operation
)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """SQLite services with the projection runner in the background and no job worker: only
    the fuzzed requests append to the log, so a refused one can be seen appending nothing."""
    folder: Path = tmp_path_factory.mktemp("fuzz")
    built = Services.build(Settings(
        database_url=f"sqlite:///{folder / 'vmledger.db'}", sim_servers=2,
        sim_server_ram_mib=65_536, projection_poll_s=0.01, worker_poll_s=0.02,
        read_timeout_s=5.0))
    built.start_background(projections=True, worker=False)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture(scope="module")
def api_schema(services: Services) -> schemathesis.schemas.BaseSchema:
    """The app's OpenAPI schema, called in-process over ASGI."""
    app = create_app(services.settings, services=services, background=False)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.parametrize(("method", "path", "mode"), OPERATIONS,
                         ids=[f"{method} {path}-{mode.value}" for method, path, mode in OPERATIONS])
def test_no_5xx_but_503_a_refused_request_appends_nothing_every_answer_conforms(
        api_schema, services: Services, method: str, path: str, mode: GenerationMode) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case) -> None:
        if case.query and "sync" in case.query:
            # a sync command answers once its job ended, after up to 60 s: no worker runs here
            case.query["sync"] = "false"
        before = services.commands.head_position()
        response = case.call()
        status = response.status_code
        assert status < 500 or status == 503, (case.method, case.formatted_path, case.query,
                                               case.body, response.text)
        # A HEAD answer has no body to check (its Content-Type is the GET's)
        case.validate_response(response, checks=CONFORMANCE if method != "HEAD" else [
            status_code_conformance, response_headers_conformance])
        if 400 <= status < 500:
            # Nothing this request caused is in the log (events carry their request's id;
            # anything else appended meanwhile, e.g. a job of an earlier request, is not its).
            request_id = response.headers["x-request-id"]
            appended = services.app.recorder.select_notifications(
                before, 10_000, inclusive_of_start=False)
            caused = [n.id for n in appended if (getattr(
                services.app.mapper.to_domain_event(n), "cause", None) or {}).get(
                    "request_id") == request_id]
            assert not caused, (case.method, case.formatted_path, case.query, case.body,
                                status, response.text)

    check()
