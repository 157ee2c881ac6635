"""The changefeed's listeners as connections: each one counted in ``/changefeeds/stats``,
held to the stream limit from its upgrade, given a bounded time to register, refused before
the upgrade as every route refuses a caller; a registration's ``after`` held to its rules
(docs/api.md, "Triton's changefeed"); and a close reason whole-worded within its 123 bytes."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.sync.client import connect

from service.api.auth import CLOSE_REASON_BYTES, close_reason
from service.changes.hub import behind
from tests.changes.live import closed_with, live_server, refused_upgrade
from tests.waiting import wait_until
from tests.changes.test_triton import V1, _ws


def _stats(url: str) -> dict:
    return httpx.get(url + "/changefeeds/stats").json()


def _registered(ws, registration: dict = V1) -> None:
    ws.send(json.dumps(registration))
    assert json.loads(ws.recv(timeout=10))["resource"] == "vm"  # the bootstrap


def test_two_listeners_of_one_instance_are_two_and_each_leaves_on_its_own(services):
    # found by a tester: listeners were kept by instance, so the second overwrote the
    # first, and the first one's end removed the second, still connected, from the stats
    with live_server(services) as url, connect(_ws(url)) as first:
        _registered(first)
        with connect(_ws(url)) as second:
            _registered(second)
            assert _stats(url)["listeners"] == 2
        wait_until(lambda: _stats(url)["listeners"] == 1, "the second listener to leave")
        assert list(_stats(url)["registrations"]["vm"]) == [V1["instance"]]


def test_an_after_of_null_is_refused_not_taken_as_now(services):
    # found by a tester: "after": null overrode the upgrade's ?after=0 and started from now
    with live_server(services) as url, connect(_ws(url) + "?after=0") as ws:
        ws.send(json.dumps({**V1, "after": None}))
        code, reason = closed_with(ws)
        assert code == 1008 and '"after" should be a log position' in reason


def test_an_unregistered_connection_counts_against_the_limit(services):
    # found by a tester: connections that never registered were not counted (150 were held
    # open with a limit of 100)
    services.settings.changes_max_streams = 1
    with live_server(services) as url, connect(_ws(url)) as idle:
        with connect(_ws(url)) as refused:  # refused at once, before it registers
            assert closed_with(refused) == (1013, "too many change streams; try again later")
        idle.send(json.dumps(V1))  # the first one still registers
        assert json.loads(idle.recv(timeout=10))["resource"] == "vm"


def test_a_connection_that_does_not_register_in_time_is_closed(services):
    services.settings.changes_registration_timeout_s = 0.2
    with live_server(services) as url, connect(_ws(url)) as ws:
        assert closed_with(ws) == (1008, "no registration within 0.2 s")
        wait_until(lambda: 'protocol="changefeed"} 0.0' in httpx.get(
                 url + "/metrics").text, "its stream slot to be given back")


@pytest.mark.parametrize("token, status, code", [
    (None, 401, "Unauthorized"), ("not-a-token", 401, "Unauthorized"),
    ("agent", 403, "Forbidden")])
def test_a_refused_upgrade_is_answered_as_every_route_refuses(
        tokened_services, tokens, token, status, code):
    # found by a tester: a bare 403 with no body and no WWW-Authenticate
    query = "" if token is None else f"?token={tokens.get(token, token)}"
    with live_server(tokened_services, background=False) as url:
        response = refused_upgrade(_ws(url) + query)
    assert response.status_code == status
    assert json.loads(response.body)["code"] == code
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_server_without_http_refusals_closes_a_refused_upgrade_naming_the_field():
    # a server lacking the ASGI "websocket.http.response" extension cannot answer the
    # handshake with HTTP: the refusal is a close 1008 whose reason names what was refused
    from fastapi import WebSocketException
    from starlette.requests import HTTPConnection

    from service.api.auth import websocket_refusal
    from service.api.errors import invalid_parameters

    connection = HTTPConnection({"type": "websocket", "path": "/changefeeds",
                                 "query_string": b"after=x", "headers": [], "extensions": {}})
    error = invalid_parameters(connection, [
        {"field": "after", "code": "Invalid", "message": "must be an integer"}])
    refusal = websocket_refusal(connection, error)
    assert isinstance(refusal, WebSocketException)
    assert (refusal.code, refusal.reason) == (1008, "after: must be an integer")
    served = {**connection.scope, "extensions": {"websocket.http.response": {}}}
    assert websocket_refusal(HTTPConnection(served), error) is error


def test_a_close_reason_keeps_whole_words_and_its_resume_position_within_123_bytes():
    # a slow listener was closed with its reason cut at 60 characters, mid-word:
    # "... more than 2 changes waiting to be sent; resu; resume after 57"
    tail = "; resume after 98765432101"
    for limit in (2, 10_000, 10**40):
        reason = close_reason(behind(limit), tail)
        assert len(reason.encode()) <= CLOSE_REASON_BYTES and reason.endswith(tail), reason
        said = reason.removesuffix(tail)
        assert said == behind(limit) or (behind(limit).startswith(said.removesuffix("…"))
                                          and not behind(limit)[len(said) - 1].isalnum()), reason
    assert close_reason(behind(2), "; resume after 57") == (
        "too far behind: more than 2 changes waiting to be sent; resume from the last id "
        "received; resume after 57")
    assert close_reason("é" * 70, "!") == "…!"  # one word too long for the room: no half
    assert close_reason("ab " * 60).endswith("ab…")
