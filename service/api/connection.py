"""The ``Connection`` header of every response, as VMAPI's restify server sends it (sdc-vmapi
``lib/restify-plugins/curl-user-agent.js``, Triton ZAPI-220).

- A client whose ``User-Agent`` is curl's gets ``Connection: close``, and a HEAD answer to it
  has no ``Content-Length``: ``curl -X HEAD`` reads the body a ``Content-Length`` announces
  (curl is told HEAD as a method, not as a HEAD request), so with one it waited until the
  server dropped the idle connection (65 s). With the connection closed it stops at once.
- Any other client is told what becomes of its connection: ``Connection: close`` when it
  asked for that, else ``Connection: keep-alive`` (VMAPI's clients read it; HTTP/1.1 alone
  would leave it implicit) with ``Keep-Alive: timeout=N``, how long ``serve`` keeps it idle.
  HEAD answers keep the ``Content-Length`` of the GET.

The header name is sent capitalised, as Node.js sends it.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CURL_USER_AGENT = re.compile(rb"^curl.+")
#: The names this middleware writes, capitalised as Node.js writes them (and as
#: service/api/http_protocol.py keeps them on the wire).
CONNECTION, KEEP_ALIVE = b"Connection", b"Keep-Alive"


class ConnectionHeaders:
    """ASGI middleware setting ``Connection`` on every HTTP response (module docstring)."""

    def __init__(self, app: ASGIApp, *, keep_alive_s: int):
        self.app = app
        self.keep_alive = f"timeout={keep_alive_s}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_headers = dict(scope.get("headers", []))
        curl = bool(CURL_USER_AGENT.match(request_headers.get(b"user-agent", b"")))
        asked = request_headers.get(b"connection", b"").lower()
        close = curl or b"close" in asked or scope.get("http_version") == "1.0"
        head = scope.get("method") == "HEAD"

        async def send_with_connection(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(name, value) for name, value in message.get("headers", [])
                           if name.lower() not in (b"connection", b"keep-alive")
                           and not (curl and head and name.lower() == b"content-length")]
                if close:
                    headers.append((CONNECTION, b"close"))
                else:
                    headers += [(CONNECTION, b"keep-alive"), (KEEP_ALIVE, self.keep_alive)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_connection)
