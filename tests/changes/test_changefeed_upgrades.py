"""WebSocket upgrades answered as every request is (docs/api.md, "Contract: conventions" and
"Triton's changefeed"): ``/changefeeds/`` is ``/changefeeds``, an upgrade to a path with no
WebSocket route is ``404 ResourceNotFound`` with the error body (after its token, as an HTTP
request's), and every answer, the ``101`` and a refusal, carries ``x-request-id``. A tester
found uvicorn's bare ``403`` with no body and no request id for all of these, which a
client reads as its token refused."""

from __future__ import annotations

import json
import re

import pytest
from websockets.sync.client import connect

from tests.changes.live import live_server, refused_upgrade
from tests.changes.test_triton import V1, _ws

GENERATED_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _ws_at(url: str, path: str) -> str:
    return url.replace("http://", "ws://") + path


def test_an_upgrade_to_the_path_with_a_trailing_slash_is_the_changefeed(services):
    with live_server(services) as url, connect(_ws(url) + "/?after=0") as listener:
        listener.send(json.dumps(V1))
        assert json.loads(listener.recv(timeout=10))["resource"] == "vm"  # the bootstrap


UNROUTED = ["/nope", "/vms", "/vms/", "/changefeeds/stats", "/changefeeds/stats/",
            "/changefeeds//", "/changefeeds/x", "/", "/docs", "/console", "/changes"]


def test_an_upgrade_to_a_path_with_no_websocket_route_is_404_with_the_error_body(services):
    with live_server(services) as url:
        for path in UNROUTED:
            response = refused_upgrade(_ws_at(url, path))
            assert response.status_code == 404, path
            assert response.headers["Content-Type"] == "application/json"
            assert json.loads(response.body) == {"code": "ResourceNotFound",
                                                 "message": "Not Found"}
            assert GENERATED_ID.fullmatch(response.headers["x-request-id"])


@pytest.mark.parametrize("token, status, code", [
    (None, 401, "Unauthorized"), ("not-a-token", 401, "Unauthorized"),
    ("agent", 404, "ResourceNotFound"), ("owner_a", 404, "ResourceNotFound")])
def test_an_upgrade_to_no_route_checks_its_token_first_as_a_request_to_no_route_does(
        tokened_services, tokens, token, status, code):
    # an HTTP request's token is checked before its route is looked for: a path's existence
    # is not told to a caller without a valid token, nor is any role refused a missing path
    query = "" if token is None else f"?token={tokens.get(token, token)}"
    with live_server(tokened_services, background=False) as url:
        response = refused_upgrade(_ws_at(url, "/vms") + query)
    assert response.status_code == status
    assert json.loads(response.body)["code"] == code
    assert GENERATED_ID.fullmatch(response.headers["x-request-id"])


def test_an_accepted_upgrade_carries_its_request_id(services):
    with live_server(services) as url:
        with connect(_ws(url), additional_headers={"x-request-id": "listener-7"}) as listener:
            assert listener.response.headers.get_all("x-request-id") == ["listener-7"]
        with connect(_ws(url)) as listener:
            assert GENERATED_ID.fullmatch(listener.response.headers["x-request-id"])


@pytest.mark.parametrize("query, status", [("?foo=1", 409), ("?after=x", 409)])
def test_a_refused_upgrade_carries_its_request_id(services, query, status):
    with live_server(services) as url:
        response = refused_upgrade(_ws(url) + query)
    assert response.status_code == status
    assert GENERATED_ID.fullmatch(response.headers["x-request-id"])


def test_a_refused_upgrade_with_a_token_carries_the_request_id_it_brought(
        tokened_services):
    from websockets.exceptions import InvalidStatus

    with live_server(tokened_services, background=False) as url, \
            pytest.raises(InvalidStatus) as refused, \
            connect(_ws(url) + "?token=nope", additional_headers={"x-request-id": "r-1"}):
        pass
    response = refused.value.response
    assert response.status_code == 401
    assert response.headers.get_all("x-request-id") == ["r-1"]
