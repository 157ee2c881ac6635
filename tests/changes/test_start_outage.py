"""``GET /changes`` asked while the database is down: the hub's first read of the log comes
before the response starts, so the client gets a 503 with ``Retry-After`` as every other
route gives (api.md, "Errors"), not a 200 whose stream breaks with a traceback in the log
(contract tester); a changefeed listener is closed with 1013 ("try again later"), not an
ASGI error's 1011. Once the database is back, the same request streams."""

from __future__ import annotations

import json

import httpx
from eventsourcing.persistence import OperationalError

from service.changes.reader import LogReader
from tests.changes.live import closed_with, live_app, sse_events


def test_changes_asked_while_the_database_is_down_is_503_then_streams(services, monkeypatch):
    with live_app(services, background=False) as (url, _app):
        def down(_reader) -> None:
            raise OperationalError("connection refused")

        with monkeypatch.context() as outage:
            outage.setattr(LogReader, "begin_proof", down)
            refused = httpx.get(f"{url}/changes", params={"after": 0}, timeout=30)
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"]
        assert refused.json()["code"] == "Unavailable"
        with httpx.stream("GET", f"{url}/changes", params={"after": 0}, timeout=30) as response:
            assert response.status_code == 200
            assert next(e for e in sse_events(response) if e is not None).event == "Registered"


def test_a_changefeed_registered_while_the_database_is_down_is_closed_1013(services,
                                                                           monkeypatch):
    from websockets.sync.client import connect

    registration = {"instance": "outage", "service": "test",
                    "changeKind": {"resource": "vm", "subResources": ["state"]}}
    with live_app(services, background=False) as (url, _app):
        feed = url.replace("http://", "ws://") + "/changefeeds"

        def down(_reader) -> None:
            raise OperationalError("connection refused")

        with monkeypatch.context() as outage, connect(feed) as ws:
            outage.setattr(LogReader, "begin_proof", down)
            ws.send(json.dumps(registration))
            assert closed_with(ws) == (
                1013, "the database is unavailable: connection refused; try again later")
        with connect(feed) as ws:
            ws.send(json.dumps(registration))
            assert json.loads(ws.recv(timeout=10))["resource"] == "vm"  # the bootstrap
