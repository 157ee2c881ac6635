"""Where an accepted command says its jobs answer (``workflow-api``), and paths with a
trailing slash: neither is built from the client's ``Host`` header (api.md, "Commands").
Found by a tester: ``Host: evil.example`` on ``POST /vms`` answered ``workflow-api:
http://evil.example``, and ``GET /vms/`` a 307 to ``http://evil.example/vms`` with no error
body and no declaration in the schema."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from service.api import deps, serving
from service.api.app import create_app
from service.cli.app import cli
from service.settings import Settings
from tests.api.helpers import assert_error, create_running_vm, vm_body
from tests.changes.live import served

EVIL = {"Host": "evil.example"}


def test_workflow_api_is_not_the_clients_host(client):
    response = client.post("/vms", json=vm_body(), headers=EVIL)
    assert response.status_code == 202, response.text
    assert response.headers["workflow-api"] == "http://testserver"


def test_workflow_api_ignores_forwarded_headers_as_served(services, monkeypatch,
                                                           database_env):
    """Found by a tester: uvicorn trusts X-Forwarded-Proto from 127.0.0.1 by default, so a
    client's ``https`` became the header's scheme on a plain-HTTP service. A service behind
    a proxy sets ``VMLEDGER_PUBLIC_URL`` instead (operations.md)."""
    given: dict = {}
    monkeypatch.setattr(serving, "run", lambda *args, **kwargs: given.update(kwargs))
    assert CliRunner().invoke(cli, ["serve"]).exit_code == 0
    options = {key: given[key] for key in ("proxy_headers", "http") if key in given}
    with served(create_app(services=services, background=False), **options) as (url, _):
        response = httpx.post(f"{url}/vms", json=vm_body(), headers={
            "X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"})
    assert response.status_code == 202, response.text
    assert response.headers["workflow-api"] == url


def test_workflow_api_is_the_configured_public_url(services):
    services.settings.public_url = "https://vmapi.example:8443/api"
    try:
        with TestClient(create_app(services=services, background=False)) as http:
            response = http.post("/vms", json=vm_body(), headers=EVIL)
        assert response.headers["workflow-api"] == "https://vmapi.example:8443/api"
    finally:
        services.settings.public_url = None


@pytest.mark.parametrize("url", ["ftp://x", "http://", "http://a b", "http://x/?q=1",
                                 "http://u:p@x", "vmapi.example"])
def test_a_public_url_that_is_no_base_is_refused(url):
    with pytest.raises(ValueError, match="public_url"):
        Settings(public_url=url)
    assert Settings(public_url="http://vmapi.example/").public_url == "http://vmapi.example"


@pytest.mark.parametrize(("server", "scheme", "root", "expected"), [
    (("127.0.0.1", 8080), "http", "", "http://127.0.0.1:8080"),
    (("10.0.0.1", 443), "https", "", "https://10.0.0.1"),
    (("::1", 8080), "http", "", "http://[::1]:8080"),
    (["testserver", 80], "http", "/api", "http://testserver/api"),
    (None, "http", "", "http://localhost"),
])
def test_the_default_is_the_address_the_request_was_accepted_on(server, scheme, root, expected):
    assert deps._server_url(scheme, None if server is None else tuple(server), root) == expected


def test_a_path_with_a_trailing_slash_is_served_as_without_it(client):
    vm_uuid = create_running_vm(client)
    listed = client.get("/vms/", headers=EVIL, follow_redirects=False)
    assert listed.status_code == 200, listed.text
    assert "location" not in listed.headers
    assert vm_uuid in [vm["uuid"] for vm in listed.json()]
    one = client.get(f"/vms/{vm_uuid}/", follow_redirects=False)
    assert one.status_code == 200 and one.json()["uuid"] == vm_uuid
    assert client.head("/vms/").headers["x-joyent-resource-count"] == "1"


def test_a_path_not_served_even_without_its_slash_is_a_404_with_the_error_body(client):
    response = client.get("/vms//", headers=EVIL, follow_redirects=False)
    assert_error(response, 404, "ResourceNotFound")
    assert "location" not in response.headers
