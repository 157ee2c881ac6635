"""``vmledger serve`` turns Nagle's algorithm off on every connection, also when uvicorn binds
the listening socket itself (``--workers N``), where asyncio would leave it on and every
keep-alive response waited ~40 ms for the client's delayed ACK (uvicorn issue #3149)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.api.http_protocol import NoDelayH11Protocol


async def hello(scope, receive, send):  # a minimal ASGI app
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def nodelay_of_accepted_connection(protocol: type[H11Protocol], loop: str = "auto") -> int:
    """TCP_NODELAY of the server side of a connection accepted on a listener bound the way
    uvicorn's multiprocess mode binds it (``proto`` 0)."""
    seen: list[int] = []

    class Recording(protocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport):
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as uvicorn's
    listener.bind(("127.0.0.1", 0))
    assert listener.proto == 0
    server = uvicorn.Server(uvicorn.Config(hello, http=Recording, log_level="warning",
                                           lifespan="off", loop=loop))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)  # polling for the server's own "started" flag, with a deadline
        assert server.started
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(1024).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(10)
    assert len(seen) == 1
    return seen[0]


def test_connections_accepted_on_a_proto_0_listener_get_tcp_nodelay():
    assert nodelay_of_accepted_connection(NoDelayH11Protocol) == 1


def test_without_it_uvicorn_leaves_nagle_on_for_such_connections():
    # The reason for NoDelayH11Protocol; if uvicorn fixes #3149, this fails and it can go.
    # (uvloop, which serve runs on, sets TCP_NODELAY itself; asyncio's loop does not.)
    assert nodelay_of_accepted_connection(H11Protocol, loop="asyncio") == 0


def test_serve_runs_uvicorn_with_it_in_one_process_or_several(monkeypatch):
    from typer.testing import CliRunner

    from service.api import processes
    from service.cli.app import cli

    given: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: given.update(kwargs))
    monkeypatch.setattr(processes, "serve_processes",
                        lambda workers, host, port, options: given.update(workers=workers,
                                                                          **options) or 0)
    assert CliRunner().invoke(cli, ["serve"]).exit_code == 0
    # h11, not httptools: VMAPI's curl-head tests need h11's HEAD and Connection handling
    assert given.pop("http") is NoDelayH11Protocol
    assert "workers" not in given
    assert CliRunner().invoke(cli, ["serve", "--workers", "2"]).exit_code == 0
    assert given["http"] is NoDelayH11Protocol
    assert given["workers"] == 2


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
