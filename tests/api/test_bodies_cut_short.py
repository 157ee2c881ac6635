"""A request whose body never arrives whole: the parser refused it (a bad chunk size) or the
client hung up mid-body. The client gets the parser's 400 (or nothing: it is gone), and the
server logs it as the client's doing, with no traceback and no 500 anywhere: not in the
access log, not in ``vmledger_http_requests_total`` (docs/api.md, "Contract: errors"). A
tester's: each logged ``ERROR vmledger.access "POST /vms failed" status 500`` with a
``ClientDisconnect`` traceback, and uvicorn's "Exception in ASGI application".

Served by uvicorn with ``vmledger serve``'s protocol, over raw sockets: the TestClient cannot
cut a body short."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Annotated

import pytest
from fastapi import Body, FastAPI
from prometheus_client import REGISTRY

from service.api import error_handlers
from service.api.app import create_app
from service.api.http_protocol import NoDelayHttpToolsProtocol
from tests.changes.live import served
from tests.waiting import wait_until

HEAD = b"POST /vms HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
CUT_SHORT = {
    "bad chunk size": HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\nzz\r\n",
    "hung up mid-body": HEAD + b"Content-Length: 500\r\n\r\n" + b'{"owner_uuid": "' + b"x" * 54,
}


def _requests_with(status: str) -> float:
    return sum(sample.value for metric in REGISTRY.collect()
               if metric.name == "vmledger_http_requests"
               for sample in metric.samples
               if sample.name == "vmledger_http_requests_total"
               and sample.labels.get("status") == status)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("sent", CUT_SHORT.values(), ids=CUT_SHORT.keys())
def test_a_body_cut_short_is_the_clients_error_logged_with_no_traceback_nor_500(
        services, caplog, sent) -> None:
    caplog.set_level(logging.INFO)
    failed_before = _requests_with("500")
    app = create_app(services=services, background=False)
    # log_config None: uvicorn's loggers propagate to the root, where caplog listens
    with served(app, http=NoDelayHttpToolsProtocol, log_config=None) as (url, _server):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(sent)
            if b"chunked" in sent:
                answer = b""
                while chunk := client.recv(65536):
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 400 Bad Request"), answer
                assert b"chunk size" in answer
        wait_until(lambda: [r for r in caplog.records if r.name == "vmledger.access"],
                   "the request's access log line")
    # the server stopped: every task of its connections has ended and logged
    lines = [r for r in caplog.records if r.name == "vmledger.access"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.INFO and lines[0].status == 400, lines[0].getMessage()
    bad = [(r.name, r.getMessage()) for r in caplog.records
           if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, bad
    assert _requests_with("500") == failed_before


async def _cut_short_post(app) -> list[dict]:
    """What ``app`` sends for a ``POST /read`` whose connection closes before any body."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "path": "/read", "raw_path": b"/read", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", b"9")],
             "scheme": "http", "server": ("x", 80), "client": ("c", 1), "root_path": ""}
    await app(scope, receive, send)
    return sent


def test_a_body_fastapi_reads_itself_cut_short_is_the_same_400() -> None:
    # a route outside AuthorizedRoute: FastAPI wraps the disconnect in its "error parsing
    # the body", which read as "not valid JSON (…)"
    app = FastAPI()
    error_handlers.install(app)

    @app.post("/read")
    def read(data: Annotated[dict, Body()]) -> dict:
        return data

    sent = asyncio.run(_cut_short_post(app))
    assert sent[0]["status"] == 400
    assert b'"code":"BadRequest"' in sent[1]["body"] and b"closed" in sent[1]["body"]
