"""The HTTP protocol ``vmledger serve`` runs uvicorn with: httptools' (llhttp, cheaper per
request than h11's pure-Python parser: docs/performance.md, "A lean HTTP edge"), with
``TCP_NODELAY`` set on every connection and the two header names VMAPI's clients read
case-sensitively written as Node.js writes them, and each response's head and body sent in one
write.

In multiprocess mode (``serve --workers N``) uvicorn binds the listening socket itself with
``proto`` 0; accepted sockets inherit it, and asyncio, which turns Nagle's algorithm off only
for sockets that say ``IPPROTO_TCP``, leaves it on. Every keep-alive response after the first
then waited for the client's delayed ACK: about 40 ms a request on Linux (uvicorn issue #3149;
found by bench/p1_commands.py, 48 ms a command with two workers against 4 ms with one:
docs/performance.md, P1).

uvicorn's httptools protocol lowercases every response header name; h11 writes them as the
app gives them. Header names are case-insensitive (RFC 9110, 5.1), but VMAPI's own curl-head
tests (Triton ZAPI-220) look for ``Connection: close`` as Node.js's restify sends it, and
``service/api/connection.py`` gives ``Connection`` and ``Keep-Alive`` so. Every other name
the app sends is lowercase already (Starlette lowercases them), as it was with h11.

A request llhttp cannot parse (an unknown method, a control character in a header, a bad
chunk size) never reaches the app: uvicorn answers it itself, in plain text with no
``x-request-id``. Here it gets the API's JSON error body and a request id instead, as every
answer does (docs/api.md, "Contract: errors").
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

from httptools import HttpParserCallbackError, HttpParserError
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from service.api import errors
from service.api.connection import CONNECTION, KEEP_ALIVE
from service.api.headers import new_request_id

log = logging.getLogger(f"vmledger.{__name__}")

#: What httptools writes for each capitalised name connection_headers gives, and what it gave.
CAPITALISED = {b"\r\n" + name.lower() + b": ": b"\r\n" + name + b": "
               for name in (CONNECTION, KEEP_ALIVE)}


class _NoDelay:
    """Turns Nagle's algorithm off on each TCP connection, then lets the protocol start."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)  # type: ignore[misc]


class ResponseHeadCasing:
    """One response's transport: its head (the first write that is not a ``1xx`` interim
    answer, such as ``100 Continue``) gets the names in ``CAPITALISED`` back, and is held
    back to go out in one write with the body that follows it; the body, and anything else,
    passes unchanged.

    uvicorn writes a response's head and its body apart: two ``send`` calls and two TCP
    segments (Nagle's algorithm is off) for every answer, each send about 4 % of an API
    process's CPU under the P1 load (docs/performance.md). The app sends its body in the
    same step as its head, so the next write is almost always the body's. Whatever comes
    instead, the head goes first: before that write, before ``close``, and at the end of the
    event loop's current step (the answer to a HEAD, or a stream whose first chunk waits).
    """

    def __init__(self, transport: asyncio.Transport):
        self._transport = transport
        self._head_written = False
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if not self._head_written and not data.startswith(b"HTTP/1.1 1"):
            self._head_written = True
            head, separator, rest = data.partition(b"\r\n\r\n")
            for lower, capitalised in CAPITALISED.items():
                head = head.replace(lower, capitalised)
            self._held = head + separator + rest
            asyncio.get_running_loop().call_soon(self._write_held)
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        self._transport.write(data)

    def _write_held(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._write_held()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _parsers_own(error: HttpParserCallbackError) -> HttpParserError:
    """The parser's refusal of the request that made a callback fail, or ``error`` itself.
    uvicorn's ``on_headers_complete`` has httptools parse the URL: a URL over llhttp's 65535
    bytes, or one it cannot read, fails that callback with ``HttpParserInvalidURLError``,
    the client's error like any other the parser finds, not a bug of ours (no traceback)."""
    cause = error.__cause__ or error.__context__
    if isinstance(cause, HttpParserError) and not isinstance(cause, HttpParserCallbackError):
        return cause
    return error


class NoDelayHttpToolsProtocol(_NoDelay, HttpToolsProtocol):
    """uvicorn's httptools protocol with ``TCP_NODELAY``, each response written through a
    ``ResponseHeadCasing``, and a request it cannot parse answered as the API answers errors
    (``send_400_response``)."""

    _refusal: bytes | None = None  # a 400 held until the requests before it are answered

    def send_400_response(self, msg: str) -> None:
        """Answer a request llhttp refused (uvicorn calls this while handling the parser's
        error, ``msg`` its generic text) with ``errors.MalformedRequestError``'s JSON body,
        the parser's reason in its message, a new ``x-request-id`` (the request's own
        cannot be trusted: it may be the malformed header), and ``Connection: close``; then
        close the connection, as uvicorn does: the parser cannot find the next request.

        Requests pipelined before the refused one are answered first: the 400 is held, and
        reading stopped, until their answers are sent (``on_response_complete``). uvicorn
        wrote it at once and closed the connection, so a command sent in the same packet as
        a malformed request was carried out but its 202 never sent (a tester)."""
        self._refusal = self._refusal or self._refusal_bytes()
        # the last request read whole: the refused one came after it (a refusal in a body
        # belongs to the request still read, whose app would wait for that body forever)
        newest = self.cycle  # uvicorn's cycle is the last request's, pipelined or not
        if newest is not None and not newest.more_body and not newest.response_complete:
            self.flow.pause_reading()
            return
        self._send_refusal()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        answered = self.cycle is None or self.cycle.response_complete  # the last request too
        if self._refusal is not None and answered and not self.transport.is_closing():
            if self.timeout_keep_alive_task is not None:
                self.timeout_keep_alive_task.cancel()
                self.timeout_keep_alive_task = None
            self._send_refusal()

    def _send_refusal(self) -> None:
        assert self._refusal is not None
        self.transport.write(self._refusal)
        self.transport.close()

    def _refusal_bytes(self) -> bytes:
        """The 400 for the parser's error being handled (``sys.exception()``)."""
        error = sys.exception()
        reason = "the request could not be parsed"
        if isinstance(error, HttpParserCallbackError):
            error = _parsers_own(error)
        if isinstance(error, HttpParserCallbackError):
            # A callback's failure is a bug of ours, not the client's to read about; uvicorn
            # logs only "Invalid HTTP request received.", so the cause would go unseen.
            log.error("an HTTP parser callback failed", exc_info=error)
        elif isinstance(error, HttpParserError) and str(error):
            reason = str(error)
        response = errors.api_error_response(errors.MalformedRequestError(reason))
        headers = [*self.server_state.default_headers, *response.raw_headers,
                   (b"x-request-id", new_request_id().encode()), (CONNECTION, b"close")]
        return b"".join([STATUS_LINE[response.status_code],
                         *(name + b": " + value + b"\r\n" for name, value in headers),
                         b"\r\n", response.body])

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        # The new request's cycle (none for an upgrade to a WebSocket) has not started yet.
        if self.cycle is not None and self.cycle is not before:
            self.cycle.transport = ResponseHeadCasing(self.transport)  # type: ignore[assignment]
