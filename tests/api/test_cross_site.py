"""Cross-site requests are refused (api.md, "Contract: cross-site requests"). Found by a
security tester: in open mode (no tokens) any web page the user visited could create a VM
(``fetch`` with ``mode: 'no-cors'`` and an untyped Blob, which sends no Content-Type and is
read as JSON) or queue a stop (a plain HTML form POST). A request whose ``Origin`` is not the
request's own, or whose ``Sec-Fetch-Site`` says another site sent it, changes nothing: 403
``Forbidden``. Clients that send neither header (curl, VMAPI's Node client) are unaffected."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from tests.api import test_authorization
from tests.api.helpers import OWNER, assert_error, vm_body, wait_job
from tests.api.test_authorization import Authed, bearer
from tests.changes.live import live_server

authed = test_authorization.authed  # the fixture: the API with a tokens file

# TestClient's requests are to http://testserver
OWN = "http://testserver"
FOREIGN = ("http://evil.example", "null", "https://testserver", "http://testserver:8080",
           "http://testserver.evil.example", "http://127.0.0.1")
CROSS_SITE = ("cross-site", "same-site")


def _head(client: TestClient) -> int:
    return client.app.state.services.commands.head_position()  # type: ignore[attr-defined]


def _vm(client: TestClient) -> str:
    created = client.post("/vms", json=vm_body()).json()
    wait_job(client, created["job_uuid"])
    return created["vm_uuid"]


def _commands(vm: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, url, request arguments) of commands as a foreign page sends them."""
    body = json.dumps(vm_body()).encode()
    return [
        ("POST", "/vms", {"content": body}),  # an untyped Blob: no Content-Type
        ("POST", f"/vms/{vm}?action=stop", {"headers": {"Content-Type": "text/plain"}}),
        ("POST", f"/vms/{vm}?action=stop",
         {"headers": {"Content-Type": "application/x-www-form-urlencoded"}}),
        ("DELETE", f"/vms/{vm}", {}),
        ("PUT", f"/vms/{vm}", {"content": b'{"state": "stopped"}'}),
        ("POST", "/servers", {"content": b"{}"}),
        ("POST", "/sim/faults", {"content": b"{}"}),
    ]


def test_a_cross_site_origin_is_refused_on_every_command_and_nothing_is_appended(
        client: TestClient) -> None:
    vm = _vm(client)
    before = _head(client)
    for origin in FOREIGN:
        for method, url, kwargs in _commands(vm):
            headers = {**kwargs.pop("headers", {}), "Origin": origin}
            response = client.request(method, url, headers=headers, **kwargs)
            body = assert_error(response, 403, "Forbidden")
            assert body["message"] == (f"cross-site request refused: Origin {origin} is not "
                                       f"this service's ({OWN})"), body
    assert _head(client) == before


@pytest.mark.parametrize("site", CROSS_SITE)
def test_a_cross_site_sec_fetch_site_is_refused_and_nothing_is_appended(
        client: TestClient, site: str) -> None:
    vm = _vm(client)
    before = _head(client)
    for method, url, kwargs in _commands(vm):
        headers = {**kwargs.pop("headers", {}), "Sec-Fetch-Site": site}
        response = client.request(method, url, headers=headers, **kwargs)
        body = assert_error(response, 403, "Forbidden")
        assert body["message"] == f"cross-site request refused: Sec-Fetch-Site {site}", body
        # the same with this service's own Origin: a browser said another site sent it
        headers["Origin"] = OWN
        assert_error(client.request(method, url, headers=headers, **kwargs), 403, "Forbidden")
    assert _head(client) == before


@pytest.mark.parametrize("headers", [
    {}, {"Origin": OWN}, {"Origin": "HTTP://TestServer"}, {"Sec-Fetch-Site": "same-origin"},
    {"Sec-Fetch-Site": "none"}, {"Origin": OWN, "Sec-Fetch-Site": "same-origin"},
])
def test_a_same_origin_or_non_browser_command_is_accepted(
        client: TestClient, headers: dict[str, str]) -> None:
    response = client.post("/vms", json=vm_body(), headers=headers)
    assert response.status_code == 202, response.text
    vm = response.json()["vm_uuid"]
    wait_job(client, response.json()["job_uuid"])
    # the VMAPI client's ``origin`` is a query parameter (who asked: cloudapi), no header
    response = client.post(f"/vms/{vm}", params={"action": "stop", "origin": "cloudapi"},
                           headers=headers)
    assert response.status_code == 202, response.text


def test_a_read_with_a_foreign_origin_is_answered(client: TestClient) -> None:
    vm = _vm(client)
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        assert client.get(f"/vms/{vm}", headers=headers).status_code == 200
        assert client.head("/vms", headers=headers).status_code == 200
        assert client.get("/ping", headers=headers).status_code == 200


def test_with_tokens_a_cross_site_command_is_refused_too(authed: Authed) -> None:
    before = authed.head()
    response = authed.http.post("/vms", json=vm_body(owner_uuid=OWNER),
                                headers={**bearer("operator"), "Origin": "http://evil.example"})
    assert_error(response, 403, "Forbidden")
    assert authed.head() == before
    response = authed.http.post("/vms", json=vm_body(owner_uuid=OWNER),
                                headers={**bearer("operator"), "Origin": OWN})
    assert response.status_code == 202, response.text


def test_the_own_origin_is_the_one_the_request_was_served_as(services) -> None:
    """The request's scheme and ``Host``, default ports left out as browsers leave them; the
    ``Host`` itself is not checked (the VMAPI client names the service by other names)."""
    app = create_app(services=services, background=True)
    with TestClient(app, base_url="https://vmapi.example:443") as https:
        ok = https.post("/vms", json=vm_body(), headers={"Origin": "https://vmapi.example"})
        assert ok.status_code == 202, ok.text
        refused = https.post("/vms", json=vm_body(), headers={"Origin": "http://vmapi.example"})
        assert_error(refused, 403, "Forbidden")
    with TestClient(app, base_url="http://other-name:8080") as named:
        ok = named.post("/vms", json=vm_body(), headers={"Origin": "http://other-name:8080"})
        assert ok.status_code == 202, ok.text
        assert named.post("/vms", json=vm_body()).status_code == 202


def test_behind_a_proxy_the_public_urls_origin_is_the_services_too(services) -> None:
    """A TLS-terminating proxy reaches the service over plain HTTP, and the service reads no
    forwarded header (operations.md, ``VMLEDGER_PUBLIC_URL``): the console's page, served
    as the public URL, sends that origin, which must pass; another still does not."""
    services.settings.public_url = "https://vmapi.example:8443/api"
    try:
        app = create_app(services=services, background=True)
        with TestClient(app, base_url="http://127.0.0.1:8080") as behind:
            ok = behind.post("/vms", json=vm_body(),
                             headers={"Origin": "https://VMAPI.example:8443"})
            assert ok.status_code == 202, ok.text
            refused = behind.post("/vms", json=vm_body(),
                                  headers={"Origin": "https://vmapi.example"})
            assert_error(refused, 403, "Forbidden")
    finally:
        services.settings.public_url = None


def test_a_changefeed_upgrade_from_another_origin_is_refused(services) -> None:
    """A WebSocket is not covered by the browser's same-origin rule: a foreign page could
    read every change of an open-mode service over it."""
    from websockets.sync.client import connect

    with live_server(services) as url:
        ws_url = url.replace("http://", "ws://") + "/changefeeds"
        refused = refused_upgrade_with_origin(ws_url, "http://evil.example")
        assert refused.status_code == 403
        assert b"cross-site request refused" in refused.body
        with connect(ws_url, origin=url):  # the console's own page: accepted
            pass
        with connect(ws_url):  # a non-browser listener: accepted
            pass


def refused_upgrade_with_origin(ws_url: str, origin: str) -> Any:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with pytest.raises(InvalidStatus) as refused, connect(ws_url, origin=origin):
        pass
    return refused.value.response

