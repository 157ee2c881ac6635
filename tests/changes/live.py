"""A real HTTP server for streaming tests (TestClient collects a whole response, so it cannot
read an endless stream), and an SSE reader."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from service.api.app import create_app
from service.container import Services
from tests.waiting import wait_until


@contextlib.contextmanager
def live_app(services: Services, *, background: bool = True) -> Iterator[tuple[str, FastAPI]]:
    """Serve the API over ``services`` on 127.0.0.1 at a free port; yields its base URL and
    the app (whose ``state.change_hub`` tests watch)."""
    app = create_app(services=services, background=background)
    with served(app) as (url, _server):
        yield url, app


@contextlib.contextmanager
def served(app: FastAPI, server_class: type[uvicorn.Server] = uvicorn.Server,
           **options: Any) -> Iterator[tuple[str, uvicorn.Server]]:
    """Serve ``app`` with a ``server_class`` in a thread, on 127.0.0.1 at a free port; yields
    its base URL and the server (set its ``should_exit`` to start its shutdown). The server
    gets no signal: it runs in a thread. ``options`` are more ``uvicorn.Config`` options."""
    config = uvicorn.Config(app, **{"log_level": "warning", "timeout_graceful_shutdown": 2,
                                    "ws": "websockets-sansio", **options},
                            host="127.0.0.1", port=0)
    server = server_class(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the server to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the server did not stop"


@contextlib.contextmanager
def live_server(services: Services, *, background: bool = True) -> Iterator[str]:
    """``live_app``'s base URL only."""
    with live_app(services, background=background) as (url, _app):
        yield url


@dataclass
class Event:
    """One SSE event as a client parses it."""

    id: str | None
    event: str
    data: str

    @property
    def json(self) -> dict:
        return json.loads(self.data)


def sse_events(response: httpx.Response) -> Iterator[Event | None]:
    """The events of an SSE response as they arrive (``None`` for each comment line)."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            yield None
            continue
        if line == "":
            if "data" in fields or "event" in fields:
                yield Event(fields.get("id"), fields.get("event", "message"),
                            fields.get("data", ""))
            fields = {}
            continue
        name, _, value = line.partition(":")
        fields[name] = value.removeprefix(" ")


def closed_with(ws: Any, timeout: float = 30) -> tuple[int | None, str | None]:
    """Read the WebSocket ``ws`` (websockets' sync client) until the server closes it: the
    close code and reason. Fails if a frame takes longer than ``timeout`` seconds."""
    from websockets.exceptions import ConnectionClosed

    with pytest.raises(ConnectionClosed):
        while True:
            ws.recv(timeout=timeout)
    return ws.close_code, ws.close_reason


def refused_upgrade(ws_url: str) -> Any:
    """The HTTP response (websockets' ``Response``: ``status_code``, ``headers``, ``body``)
    that refused the WebSocket upgrade to ``ws_url``. Fails if the upgrade was accepted."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with pytest.raises(InvalidStatus) as refused, connect(ws_url):
        pass
    return refused.value.response
