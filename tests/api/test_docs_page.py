"""The API docs (``/docs``, Swagger UI) and the schema (``/openapi.json``) are served by the
service itself, with no CDN, and without a token even where tokens are configured (they hold
no data); the schema declares the bearer token so the page's calls can carry one
(service/api/docs_page.py; docs/api.md, "OpenAPI schema")."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.container import Services
from tests.api.helpers import assert_error

TOKEN = "docs-page-operator-token"


@pytest.fixture
def guarded(services: Services) -> Iterator[TestClient]:
    """The API with one operator token configured."""
    entry = {"name": "docs-operator", "role": "operator",
             "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
    settings = services.settings.model_copy(update={"tokens": json.dumps([entry])})
    with TestClient(create_app(settings, services=services, background=False)) as client:
        yield client


def test_the_docs_page_loads_its_script_and_style_from_the_service(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sorted(loaded) == ["/docs/static/favicon.png", "/docs/static/swagger-ui-bundle.js",
                              "/docs/static/swagger-ui.css"]
    assert "url: '/openapi.json'" in page.text
    for path, kind in [("/docs/static/swagger-ui-bundle.js", "text/javascript"),
                       ("/docs/static/swagger-ui.css", "text/css"),
                       ("/docs/static/favicon.png", "image/png")]:
        asset = client.get(path)
        assert asset.status_code == 200, path
        assert asset.headers["content-type"].startswith(kind)
        assert int(asset.headers["content-length"]) == len(asset.content) > 1000


def test_head_of_the_docs_answers_headers_only(client: TestClient) -> None:
    for path in ("/docs", "/docs/static/swagger-ui.css", "/openapi.json"):
        got, head = client.get(path), client.head(path)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == got.headers["content-length"]


def test_an_unknown_docs_asset_is_a_404(client: TestClient) -> None:
    assert_error(client.get("/docs/static/nothing.js"), 404, "ResourceNotFound")


def test_docs_and_schema_need_no_token_where_tokens_are_configured(
    guarded: TestClient,
) -> None:
    assert_error(guarded.get("/vms"), 401, "Unauthorized")
    assert guarded.get("/docs").status_code == 200
    assert guarded.get("/docs/static/swagger-ui-bundle.js").status_code == 200
    schema = guarded.get("/openapi.json")
    assert schema.status_code == 200
    assert "/vms" in schema.json()["paths"]


def test_the_schema_declares_the_bearer_token_as_optional(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"] == {
        "bearerToken": {"type": "http", "scheme": "bearer"}}
    # a token, or none where the service runs without tokens
    assert schema["security"] == [{"bearerToken": []}, {}]


def test_the_docs_answer_only_get_and_head(client: TestClient) -> None:
    for method, path in [("POST", "/docs"), ("PUT", "/docs/static/swagger-ui.css"),
                         ("DELETE", "/openapi.json")]:
        response = client.request(method, path)
        assert_error(response, 405, "BadMethod")
        assert response.headers["allow"] == "GET, HEAD"


def test_what_is_served_without_a_token_follows_the_connection_rules(client: TestClient) -> None:
    # served in front of the envelope: a curl HEAD was told a Content-Length and no
    # Connection: close, so curl -X HEAD waited for the idle timeout (service/api/connection.py)
    for path in ("/docs", "/openapi.json", "/docs/static/swagger-ui.css", "/console",
                 "/console/static/console.css"):
        curl = client.head(path, headers={"User-Agent": "curl/8.5.0"})
        assert curl.status_code == 200, path
        assert curl.headers["connection"] == "close", path
        assert "content-length" not in curl.headers, path
        other = client.get(path)
        assert other.headers["connection"] == "keep-alive", path
        assert other.headers["keep-alive"].startswith("timeout="), path
