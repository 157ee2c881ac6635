"""The ``Connection`` header of every response, as VMAPI's restify server sends it (sdc-vmapi
``lib/restify-plugins/curl-user-agent.js``, Triton ZAPI-220).

- A client whose ``User-Agent`` is curl's gets ``Connection: close``, and a HEAD answer to it
  has no ``Content-Length``: ``curl -X HEAD`` reads the body a ``Content-Length`` announces
  (curl is told HEAD as a method, not as a HEAD request), so with one it waited until the
  server dropped the idle connection (65 s). With the connection closed it stops at once.
- Any other client is told what becomes of its connection: ``Connection: close`` when it
  asked for that or its request is not HTTP/1.1 (uvicorn closes every other), else ``Connection: keep-alive`` (VMAPI's clients read it; HTTP/1.1 alone
  would leave it implicit) with ``Keep-Alive: timeout=N``, how long ``serve`` keeps it idle.
  HEAD answers keep the ``Content-Length`` of the GET.

The header name is sent capitalised, as Node.js sends it. service/api/envelope.py applies
these rules to every HTTP answer, its own refusals included.
"""

from __future__ import annotations

import re

from starlette.types import Scope, Send

CURL_USER_AGENT = re.compile(rb"^curl.+")
#: The names written here, capitalised as Node.js writes them (and as
#: service/api/http_protocol.py keeps them on the wire).
CONNECTION, KEEP_ALIVE = b"Connection", b"Keep-Alive"
#: How long ``serve`` keeps an idle keep-alive connection (seconds; uvicorn's default is 5),
#: also announced on every response as ``Keep-Alive: timeout=N``. The VMAPI client pools
#: connections with no idle limit of its own, so a request it sends just as the server closes
#: an idle connection fails (ECONNRESET, "socket hang up"); with 5 s that happened whenever
#: the client had waited one of its 5 s job polls. Well above the polling interval, it seldom
#: can.
KEEP_ALIVE_S = 65
#: Names the route's answer may not set itself: the connection is the server's to describe.
OWN_NAMES = frozenset((b"connection", b"keep-alive"))


def connection_headers(scope: Scope, keep_alive: bytes
                       ) -> tuple[list[tuple[bytes, bytes]], bool]:
    """The headers an answer to ``scope`` (an HTTP request) gets, ``Connection`` and, on a
    kept-alive connection, ``Keep-Alive: keep_alive`` (e.g. ``b"timeout=65"``), and whether its
    ``Content-Length`` is dropped (curl's HEAD): the module docstring's rules, read from the
    request before a HEAD is run as its GET (service/api/head.py)."""
    curl = asked = b""
    for name, value in scope["headers"]:
        if name == b"user-agent":
            curl = value
        elif name == b"connection":
            asked = value
    is_curl = CURL_USER_AGENT.match(curl) is not None
    # uvicorn keeps only an HTTP/1.1 connection open (llhttp also reads "HTTP/1.0" and
    # "HTTP/2.0" request lines): any other is told it is closed, as it is
    if is_curl or b"close" in asked.lower() or scope.get("http_version", "1.1") != "1.1":
        return [(CONNECTION, b"close")], is_curl and scope["method"] == "HEAD"
    return [(CONNECTION, b"keep-alive"), (KEEP_ALIVE, keep_alive)], False


async def send_fixed(scope: Scope, send: Send, body: bytes,
                     headers: list[tuple[bytes, bytes]], status: int = 200) -> None:
    """Answer ``scope`` (a GET or HEAD) ``status`` with ``body`` (none to a HEAD) and ``headers``,
    by this module's rules (``connection_headers``), for what is served in front of the
    envelope without a token: the console's pages and assets, the API docs."""
    added, drop_length = connection_headers(scope, b"timeout=%d" % KEEP_ALIVE_S)
    length = [] if drop_length else [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, *length, *added]})
    await send({"type": "http.response.body",
                "body": b"" if scope["method"] == "HEAD" else body})
