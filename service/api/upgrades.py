"""A WebSocket upgrade to a path no WebSocket route serves (``/vms``, ``/nope``,
``/changefeeds/stats``): answered as an HTTP request to a path with no route is, ``404
ResourceNotFound`` with the error body, once its token is checked (docs/api.md, "Contract:
conventions"). Starlette's router closed it before accepting it, which uvicorn answers with a
bare ``403`` (the ASGI spec's answer to such a close): no body, no ``x-request-id``, read by
a client as its token refused (a tester)."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send

from service.api.auth import upgrading_principal

# The ASGI extension that lets an app answer a WebSocket handshake with an HTTP response
# (uvicorn has it): without it, a refusal can only be that bare 403
DENIAL_RESPONSE = "websocket.http.response"


def install(app: FastAPI) -> None:
    """Make ``app``'s router answer an upgrade no route takes with its token's refusal (401,
    or the 403 or 409 of a request from another site or with a bad URL:
    ``auth.upgrading_principal``), else ``404 ResourceNotFound``, through the app's error
    handlers as an HTTP refusal is (the envelope adds ``x-request-id``). An HTTP request, and
    an upgrade on a server without ``DENIAL_RESPONSE``, are the router's own as before."""
    not_found = app.router.default

    async def unrouted(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and DENIAL_RESPONSE in scope.get("extensions", {}):
            upgrading_principal(HTTPConnection(scope, receive))
            raise HTTPException(404)
        await not_found(scope, receive, send)

    app.router.default = unrouted
