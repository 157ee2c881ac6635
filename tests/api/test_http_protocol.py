"""``vmledger serve`` runs httptools' protocol, turning Nagle's algorithm off on every
connection, also when uvicorn binds the listening socket itself (``--workers N``), where
asyncio would leave it on and every keep-alive response waited ~40 ms for the client's delayed
ACK (uvicorn issue #3149); and it writes ``Connection`` and ``Keep-Alive`` capitalised, as
Node.js does (VMAPI's curl-head tests read them case-sensitively), and nothing else changed;
and each response's head goes out in one write with its body."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.api.connection import connection_headers
from service.api.http_protocol import NoDelayHttpToolsProtocol, ResponseHeadCasing
from tests.waiting import wait_until

# A body that holds what the head's names look like: it must pass unchanged.
BODY = b"ok\r\nconnection: close\r\nkeep-alive: x\r\n"


async def hello(scope, receive, send):  # a minimal ASGI app
    if scope["type"] != "http":
        return
    body = b""
    while True:  # read the request's body (a client that sent Expect: 100-continue waits)
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"Connection", b"keep-alive"), (b"Keep-Alive", b"timeout=5"),
        (b"x-request-id", b"r1"), (b"content-length", str(len(BODY + body)).encode())]})
    await send({"type": "http.response.body", "body": BODY + body})


def served(protocol: type, request: bytes, loop: str = "auto", app=hello, *,
           until_closed: bool = False) -> tuple[int, bytes]:
    """TCP_NODELAY of the server side of a connection accepted on a listener bound the way
    uvicorn's multiprocess mode binds it (``proto`` 0), and the bytes ``request`` was
    answered with (read until the answer's end: its ``Content-Length``; or, with
    ``until_closed``, until the server closes the connection)."""
    seen: list[int] = []

    class Recording(protocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport):
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as uvicorn's
    listener.bind(("127.0.0.1", 0))
    assert listener.proto == 0
    server = uvicorn.Server(uvicorn.Config(app, http=Recording, log_level="warning",
                                           lifespan="off", loop=loop))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), "the server to start",
                   timeout=10)
        assert server.started
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(request)
            answer = b""
            while until_closed or not _complete(answer,
                                                head_only=request.startswith(b"HEAD ")):
                chunk = client.recv(65536)
                if until_closed and not chunk:
                    break
                assert chunk, f"connection closed before the answer ended: {answer!r}"
                answer += chunk
    finally:
        server.should_exit = True
        thread.join(10)
    assert len(seen) == 1
    return seen[0], answer


def _complete(answer: bytes, *, head_only: bool = False) -> bool:
    """Whether ``answer`` holds a whole final answer (after any ``100 Continue``): its head
    alone for a HEAD."""
    if answer.startswith(b"HTTP/1.1 100"):
        answer = answer.partition(b"\r\n\r\n")[2]
    head, separator, body = answer.partition(b"\r\n\r\n")
    if head_only:
        return bool(separator)
    length = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
    return bool(separator and length) and len(body) >= int(length.group(1))


GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def test_connections_accepted_on_a_proto_0_listener_get_tcp_nodelay():
    assert served(NoDelayHttpToolsProtocol, GET)[0] == 1
    assert served(NoDelayHttpToolsProtocol, GET, loop="asyncio")[0] == 1


def test_without_it_uvicorn_leaves_nagle_on_for_such_connections():
    # The reason for _NoDelay; if uvicorn fixes #3149, this fails and it can go.
    # (uvloop, which serve runs on, sets TCP_NODELAY itself; asyncio's loop does not.)
    assert served(HttpToolsProtocol, GET, loop="asyncio")[0] == 0


def test_httptools_writes_connection_and_keep_alive_capitalised_and_nothing_else_changed():
    answer = served(NoDelayHttpToolsProtocol, GET)[1]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\nConnection: keep-alive\r\n" in head + b"\r\n"
    assert b"\r\nKeep-Alive: timeout=5" in head
    assert b"\r\nx-request-id: r1" in head  # Starlette's lowercase names stay lowercase
    assert body == BODY


def test_plain_httptools_lowercases_them():
    # The reason for ResponseHeadCasing; if uvicorn keeps the app's casing, this fails.
    head = served(HttpToolsProtocol, GET)[1].partition(b"\r\n\r\n")[0]
    assert b"\r\nconnection: keep-alive" in head


def test_a_100_continue_before_the_head_leaves_the_head_to_be_cased():
    request = (b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
               b"Content-Length: 4\r\n\r\nbody")
    answer = served(NoDelayHttpToolsProtocol, request)[1]
    interim, _, final = answer.partition(b"\r\n\r\n")
    assert interim == b"HTTP/1.1 100 Continue"  # uvicorn's, written when the app reads
    head, _, body = final.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"\r\nConnection: keep-alive" in head
    assert body == BODY + b"body"


async def told(scope, receive, send):  # answers with the Connection headers the API gives
    if scope["type"] != "http":
        return
    added, _ = connection_headers(scope, b"timeout=65")
    await send({"type": "http.response.start", "status": 200,
                "headers": [*added, (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize("version, kept", [(b"1.1", True), (b"1.0", False), (b"2.0", False)])
def test_the_connection_header_says_what_the_server_does_with_the_connection(version, kept):
    """uvicorn keeps only an HTTP/1.1 connection open; an ``HTTP/2.0`` request line (HTTP/2
    in the syntax of HTTP/1, which llhttp reads) was told ``Connection: keep-alive`` with
    ``Keep-Alive``, and uvicorn added its own ``connection: close`` (found by a tester)."""
    answer = served(NoDelayHttpToolsProtocol, b"GET / HTTP/" + version + b"\r\nHost: x\r\n\r\n",
                    app=told)[1]
    head = answer.partition(b"\r\n\r\n")[0].lower()
    told_values = re.findall(rb"\r\nconnection: ([^\r]*)", head)
    assert told_values == ([b"keep-alive"] if kept else [b"close"]), answer
    assert (b"\r\nkeep-alive: timeout=65" in head) is kept


def test_the_answer_to_a_head_request_is_its_head_alone():
    answer = served(NoDelayHttpToolsProtocol, b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")[1]
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n")
    assert b"\r\nConnection: keep-alive" in answer


MALFORMED = {
    "unknown method": (b"FOO /vms HTTP/1.1\r\nHost: x\r\n\r\n", "Invalid method"),
    "control character in a header value": (
        b"GET /vms HTTP/1.1\r\nHost: x\r\nx-request-id: \x7f\r\n\r\n", "header value"),
    "space in a header name": (b"GET /vms HTTP/1.1\r\nHo st: x\r\n\r\n", "header token"),
    "unknown version": (b"GET /vms HTTP/9.9\r\nHost: x\r\n\r\n", "HTTP version"),
    "not HTTP": (b"hello\r\n\r\n", "Invalid method"),
    "bad chunk size": (
        b"POST /vms HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "chunk size"),
}


@pytest.mark.parametrize("request_, reason", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_request_the_parser_refuses_gets_our_json_400_with_a_request_id(request_, reason):
    # found by a tester: uvicorn answered these itself, before the app, in text/plain
    # ("Invalid HTTP request received.") with no x-request-id (docs/api.md, "Contract: errors")
    answer = served(NoDelayHttpToolsProtocol, request_)[1]
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = dict(line.split(b": ", 1) for line in lines[1:])
    assert lines[0] == b"HTTP/1.1 400 Bad Request"
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(body)
    assert headers[b"Connection"] == b"close"
    assert re.fullmatch(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                        headers[b"x-request-id"])
    error = json.loads(body)
    assert error["code"] == "BadRequest" and reason in error["message"]


def test_a_parser_callback_that_fails_is_logged_and_its_error_not_told(caplog):
    class Failing(NoDelayHttpToolsProtocol):
        def on_url(self, url):
            raise ValueError("a bug of ours")

    answer = served(Failing, GET)[1]
    assert answer.startswith(b"HTTP/1.1 400") and b"x-request-id: " in answer
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["message"] == (
        "Invalid HTTP request: the request could not be parsed")
    assert "a bug of ours" in caplog.text


@pytest.mark.parametrize("url, reason", [
    (b"/vms?alias=" + b"a" * 70000, ("url is too long: url length of 70011 bytes exceeds the "
                                     "maximum of 65535 bytes")),
    (b"http://[/vms", "invalid url"),
])
def test_a_url_the_parser_cannot_read_is_the_clients_error_told_and_not_logged(
        caplog, url, reason):
    # found by a tester: the 400 said only "the request could not be parsed", and an ERROR
    # with a traceback was logged for what is the client's error, not the server's
    caplog.set_level("DEBUG")
    answer = served(NoDelayHttpToolsProtocol, b"GET " + url + b" HTTP/1.1\r\nHost: x\r\n\r\n")[1]
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")
    error = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert error["code"] == "BadRequest"
    assert error["message"].lower().startswith("invalid http request: " + reason.lower()), error
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL") or r.exc_info]


@pytest.mark.parametrize("before", [1, 2])
def test_requests_before_one_the_parser_refuses_are_answered_first(before):
    """Found by a tester: a command followed in the same packet by a malformed request was
    carried out, but the client got only the 400 (the connection closed before the first
    answer): the answers must come in the requests' order, the 400 last."""
    answer = served(NoDelayHttpToolsProtocol, GET * before + b"FOO / HTTP/1.1\r\n\r\n",
                    until_closed=True)[1]
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == before
    assert answer.index(b"HTTP/1.1 400 Bad Request\r\n") > answer.rindex(BODY), answer
    assert answer.count(b"HTTP/1.1 ") == before + 1


def test_plain_httptools_answers_them_in_text():
    # The reason for NoDelayHttpToolsProtocol.send_400_response; if uvicorn changes, this
    # fails and the override can be checked against it.
    answer = served(HttpToolsProtocol, MALFORMED["unknown method"][0])[1]
    assert b"content-type: text/plain" in answer and b"x-request-id" not in answer


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def close(self) -> None:
        self.calls.append(("close", b""))

    def is_closing(self) -> bool:
        return bool(self.calls) and self.calls[-1][0] == "close"


HEAD = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n"
CASED = HEAD.replace(b"connection:", b"Connection:")


def _through_casing(steps) -> list[tuple[str, bytes]]:
    """The transport's calls when ``steps(casing)`` runs in one step of an event loop, and
    after the loop's next steps."""
    transport = RecordingTransport()

    async def main() -> None:
        steps(ResponseHeadCasing(transport))
        await asyncio.sleep(0)  # let the loop run what the step scheduled
        await asyncio.sleep(0)

    asyncio.run(main())
    return transport.calls


def test_a_head_and_the_body_after_it_go_out_in_one_write():
    def steps(casing):
        casing.write(HEAD)
        casing.write(b"ok")
    assert _through_casing(steps) == [("write", CASED + b"ok")]


def test_a_head_with_no_body_after_it_goes_out_at_the_end_of_the_step():
    assert _through_casing(lambda casing: casing.write(HEAD)) == [("write", CASED)]


def test_a_head_goes_out_before_a_close():
    def steps(casing):
        casing.write(HEAD)
        casing.close()
    assert _through_casing(steps) == [("write", CASED), ("close", b"")]


def test_an_interim_answer_is_not_held():
    def steps(casing):
        casing.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        casing.write(HEAD)
        casing.write(b"o")
        casing.write(b"k")
    assert _through_casing(steps) == [("write", b"HTTP/1.1 100 Continue\r\n\r\n"),
                                      ("write", CASED + b"o"), ("write", b"k")]


def test_serve_runs_uvicorn_with_it_in_one_process_or_several(monkeypatch, database_env):
    from typer.testing import CliRunner

    from service.api import processes, serving
    from service.cli.app import cli

    given: dict = {}
    # serve runs uvicorn through serving.run (its StreamEndingServer); patching uvicorn.run
    # instead left a real server listening on 8080 until the run was killed
    monkeypatch.setattr(serving, "run", lambda *args, **kwargs: given.update(kwargs))
    monkeypatch.setattr(processes, "serve_processes",
                        lambda workers, host, port, options: given.update(workers=workers,
                                                                          **options) or 0)
    assert CliRunner().invoke(cli, ["serve"]).exit_code == 0
    assert given.pop("http") is NoDelayHttpToolsProtocol
    assert "workers" not in given
    assert CliRunner().invoke(cli, ["serve", "--workers", "2"]).exit_code == 0
    assert given["http"] is NoDelayHttpToolsProtocol
    assert given["workers"] == 2


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
