"""The envelope around every HTTP request: its id, its log scope and closing log line, its
metrics, the body-size, API-version, URL and token checks that come before any route, and
the ``x-request-id`` and ``Api-Version`` headers of every answer.

Plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware("http")``) ran
each request's app in a task of its own and passed the response through memory streams, CPU
spent on every request (docs/performance.md, "A lean HTTP edge"). Here the app runs in the
request's own task and context, so what the route binds to the log scope (auth.authorize,
deps.accepted) is on the closing line, as before.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import metrics
from service.api import errors, routes_changes
from service.api.tokens import Tokens
from service.api.deps import request_id_of
from service.api.schemas import printable, unstorable
from service.commands.versioning import InvalidVersionError, behaviour_for, negotiate
from service.logs import bind, log_context

# One line per request, when its answer starts (uvicorn's own access log is off: this one has
# the route template, the duration and the scope's fields).
access_log = logging.getLogger("vmledger.access")

_COMMAND_METHODS = frozenset(("POST", "PUT", "DELETE"))


class Envelope:
    """ASGI middleware: what every HTTP request goes through before and after its route."""

    def __init__(self, app: ASGIApp, *, tokens: Tokens, max_body_bytes: int):
        self.app = app
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        request_id = request.state.request_id = request_id_of(request)
        started = time.perf_counter()
        answer: dict[str, Any] = {"headers": {"x-request-id": request_id}}

        async def answering(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in answer["headers"].items():
                    headers[name] = value
                answer["status"] = status = message["status"]
                metrics.REQUESTS.labels(route=_route(scope), status=str(status)).inc()
                access_log.info("%s %s %s", request.method, scope["path"], status,
                                extra=_access_fields(request, status, started))
            await send(message)

        # Every line logged while handling the request carries its id (and, once known, the
        # actor, and the VM and job its route handles: auth.authorize, deps.accepted).
        with log_context(request_id=request_id):
            try:
                await self._respond(request, answer["headers"], answering)
            except Exception:
                if "status" not in answer:
                    access_log.exception("%s %s failed", request.method, scope["path"],
                                         extra=_access_fields(request, 500, started))
                raise

    async def _respond(self, request: Request, headers: dict[str, str], send: Send) -> None:
        """The checks before the route, then the route; ``headers`` gains ``Api-Version``
        once the version is negotiated."""
        scope, receive = request.scope, request.receive
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await errors.api_error_response(errors.PayloadTooLargeError(self.max_body_bytes))(
                scope, receive, send)
            return
        try:
            version = negotiate(request.headers.get("accept-version"))
        except InvalidVersionError as error:
            await errors.error_response(request, error)(scope, receive, send)
            return
        request.state.behaviour = behaviour_for(version)
        headers["Api-Version"] = version
        refusal = _refusal(request, self.tokens)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        started = time.perf_counter()
        await self.app(scope, receive, send)
        if request.method in _COMMAND_METHODS:
            metrics.COMMAND_LATENCY.labels(route=f"{request.method} {_route(scope)}").observe(
                time.perf_counter() - started)


def _refusal(request: Request, tokens: Tokens) -> Response | None:
    """The answer to a request refused before its route (text no route could store in its
    URL, a bad token), or None, the principal then in ``request.state`` and the log scope."""
    problem = _unstorable_in_url(request)
    if problem:
        return errors.api_error_response(errors.invalid_parameters(
            request, [{"field": problem[0], "code": "Invalid", "message": problem[1]}]))
    try:
        principal = tokens.authenticate(routes_changes.stream_authorization(request))
    except errors.UnauthorizedError as error:
        return errors.api_error_response(error)
    request.state.principal = principal
    request.state.actor = principal.name
    bind(actor=principal.name)
    return None


def _route(scope: Scope) -> str:
    """The template of the route that matched (set by the router), or ``unmatched``."""
    return getattr(scope.get("route"), "path", None) or "unmatched"


def _unstorable_in_url(request: Request) -> tuple[str, str] | None:
    """The first path or query text no route could look up or store (a NUL character:
    PostgreSQL's text refuses it), as (field, message), or None."""
    if "\x00" in request.scope["path"]:
        return "path", "the path may not contain the NUL character"
    if not request.scope.get("query_string"):
        return None
    for name, value in request.query_params.multi_items():
        problem = unstorable({name: value})
        if problem:
            return printable(name), problem
    return None


def _access_fields(request: Request, status: int, started: float) -> dict[str, object]:
    """The fields of a request's closing log line (beside the scope's request id, actor, VM
    and job)."""
    return {
        "method": request.method,
        "path": request.scope["path"],
        "route": _route(request.scope),
        "status": status,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
