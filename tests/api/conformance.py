"""Every response a test client sees is checked against the app's OpenAPI schema (docs/api.md,
"OpenAPI schema"): its status is one the operation declares, and its content type, body and
required headers are those declared for that status (schemathesis' response checks). Test
clients install it with ``conforming(client)``, an httpx response hook, so a test that sees an
answer the schema does not describe fails, whatever the test asserts."""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis
from fastapi.testclient import TestClient


class SchemaMismatch(AssertionError):
    """A response the schema does not describe."""


# Parsed schemas by route table: every test builds an app of its own, and generating its
# OpenAPI document (about 80 ms) and compiling the schema's validators anew was most of a
# test's set-up; apps with the same routes have the same document.
_SCHEMAS: dict[tuple[Any, ...], Any] = {}


def _schema_of(app: Any, *, cached: bool) -> Any:
    """The schemathesis schema of ``app``'s OpenAPI document, parsed once per route table
    (``cached``), or anew."""
    if not cached:
        return schemathesis.openapi.from_dict(app.openapi())
    key = tuple((getattr(route, "path", None), tuple(sorted(getattr(route, "methods", None)
                                                            or ())),
                 getattr(route, "name", None)) for route in app.routes)
    if key not in _SCHEMAS:
        _SCHEMAS[key] = schemathesis.openapi.from_dict(app.openapi())
    return _SCHEMAS[key]


def conforming(client: TestClient, *, cached: bool = True) -> TestClient:
    """``client`` (of a FastAPI app), checking every response it receives; ``cached=False``
    for an app whose declarations a test changed (its routes are those of every app)."""
    schema = _schema_of(client.app, cached=cached)

    def check(response: httpx.Response) -> None:
        request = response.request
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        if not streamed:  # a stream may never end: its status and type are checked, no body
            response.read()
        operation = schema.find_operation_by_path(request.method, request.url.path)
        if operation is None:
            return  # not an operation: an unknown path or method (404/405), /openapi.json
        declared = operation.definition.raw["responses"]
        where = f"{request.method} {request.url.path} answered {response.status_code}"
        if str(response.status_code) not in declared:
            raise SchemaMismatch(f"{where}, which the schema does not declare "
                                 f"({', '.join(declared)}): "
                                 f"{'(a stream)' if streamed else response.text[:300]}")
        content = declared[str(response.status_code)].get("content")
        media_type = response.headers.get("content-type", "").split(";")[0].strip()
        if content and request.method != "HEAD" and media_type not in content:
            raise SchemaMismatch(f"{where} as {media_type!r}; the schema says "
                                 f"{', '.join(content)}")
        if request.method == "HEAD" or streamed:
            return  # no body to check (a HEAD's Content-Type is that of the GET's answer)
        try:
            operation.validate_response(response)
        except Exception as error:  # schemathesis' FailureGroup
            raise SchemaMismatch(f"{where}: {error}") from None

    client.event_hooks = {"response": [*client.event_hooks["response"], check]}
    return client
