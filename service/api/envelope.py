"""The envelope around every HTTP request, vmledger's one ASGI layer in front of the routes:
its id, its log scope and closing log line, its metrics, the cross-site, body-size, API-version, URL
(unstorable text, a query parameter given twice) and token checks that come before any
route, the bound on its database waits, HEAD run as GET, and the head of every answer
(``x-request-id``, ``Api-Version``, ``Connection``).

One layer with one ``send`` wrapper for the whole request: each middleware used to add a call
frame and a wrapper of its own to every message of every answer (docs/performance.md, "A lean
HTTP edge"); the rules of each are functions of their modules (service/api/connection.py,
service/api/head.py), applied here in the order they were layered. Plain ASGI, not
Starlette's ``BaseHTTPMiddleware``, so the app runs in the request's own task and context and
what the route binds to the log scope (auth.authorize, deps.accepted) is on the closing line.
The console's pages are served in front of it (service/console/pages.py: no token). A
WebSocket upgrade (the changefeed's) gets its path, id, log scope and access line here, and its
checks from its route (``Envelope._upgrade``).
"""

from __future__ import annotations

import logging
import time

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import metrics
from service.api import errors, routes_changes
from service.api.connection import OWN_NAMES, connection_headers
from service.api.cross_site import cross_site_refusal
from service.api.head import head_as_get
from service.api.headers import request_id_in, request_id_of
from service.api.tokens import Tokens
from service.api.url_checks import VERSION_HEADERS, repeated_header, requested_version, url_refusal
from service.commands.version_ranges import InvalidVersionError, negotiate
from service.commands.versioning import behaviour_for
from service.db_limits import request_waits_bounded
from service.logs import bind, log_context

# One line per request, when its answer starts (uvicorn's own access log is off: this one has
# the route template, the duration and the scope's fields).
access_log = logging.getLogger("vmledger.access")

_COMMAND_METHODS = frozenset(("POST", "PUT", "DELETE"))
# What answers a WebSocket upgrade (ASGI), and its status: accepted; refused with an HTTP
# answer (the "websocket.http.response" extension: its own); closed before it was accepted,
# which the server answers 403 (the ASGI spec)
_UPGRADE_ANSWERS = {"websocket.accept": 101, "websocket.http.response.start": None,
                    "websocket.close": 403}
# Header names the envelope writes, replacing any the route's answer has.
_REPLACED = OWN_NAMES | {b"x-request-id", b"api-version"}


class Envelope:
    """ASGI middleware: what every HTTP request goes through before and after its route.

    ``router`` is the app's (which GET routes a HEAD runs), ``keep_alive_s`` what
    ``Keep-Alive: timeout=N`` announces, ``max_body_bytes`` the largest body (413 above it),
    ``db_wait_s`` each database call's bound on its wait within the request, ``public_url``
    the ``VMLEDGER_PUBLIC_URL`` setting.
    """

    def __init__(self, app: ASGIApp, *, router: Router, tokens: Tokens, max_body_bytes: int,
                 keep_alive_s: int, db_wait_s: float, public_url: str | None = None):
        self.app = app
        self.public_url = public_url  # its origin is the service's too (cross_site_refusal)
        self.router = router
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        self.keep_alive = f"timeout={keep_alive_s}".encode()
        self.db_wait_s = db_wait_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await self._upgrade(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        path = scope["path"]
        if len(path) > 1 and path[-1] == "/":
            scope = without_trailing_slash(scope)
        request = Request(scope, receive)
        request_id = request.state.request_id = request_id_of(request)
        started = time.perf_counter()
        # What the answer's head gains (``Api-Version`` once negotiated), and whether curl's
        # HEAD loses its Content-Length: decided on the request as it came, a HEAD.
        added, drop_length = connection_headers(scope, self.keep_alive)
        added.append((b"x-request-id", request_id.encode()))
        replaced = _REPLACED | {b"content-length"} if drop_length else _REPLACED
        # The scope the route runs in: a GET's for a HEAD only a GET route answers.
        routed = scope
        status = 0

        async def answering(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *((name, value) for name, value in message.get("headers", ())
                      if name.lower() not in replaced), *added]
                status = message["status"]
                route = _route(routed)
                metrics.count_request(route, status)
                access_log.info("%s %s %s", request.method, scope["path"], status,
                                extra=_access_fields(request.method, scope["path"], route,
                                                     status, started))
            elif routed is not scope and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        # Every line logged while handling the request carries its id (and, once known, the
        # actor, and the VM and job its route handles: auth.authorize, deps.accepted).
        with log_context(request_id=request_id):
            try:
                declared = _declared_length(request.headers.get("content-length"))
                refusal = self._refusal(request, added, declared)
                if refusal is not None:
                    await refusal(scope, receive, answering)
                    return
                if scope["method"] == "HEAD" and head_as_get(self.router, scope):
                    routed = {**scope, "method": "GET"}
                if declared is None:  # chunked, or no length: counted as it arrives
                    receive = _limited(receive, self.max_body_bytes)
                command_started = time.perf_counter()
                with request_waits_bounded(self.db_wait_s):
                    await self.app(routed, receive, answering)
                if request.method in _COMMAND_METHODS:
                    metrics.observe_command(f"{request.method} {_route(routed)}",
                                            time.perf_counter() - command_started)
            except Exception:
                if not status:
                    access_log.exception("%s %s failed", request.method, scope["path"],
                                         extra=_access_fields(request.method, scope["path"],
                                                              _route(routed), 500, started))
                raise

    async def _upgrade(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket upgrade (the changefeed's), as a request is served: its path without a
        trailing ``/``, its id in its log scope and in ``x-request-id`` on its answer (the
        ``101``, or the HTTP answer refusing it), and one access line when it is answered
        (``GET PATH STATUS``: 101 when accepted). Its checks and token are its route's
        (``auth.authorize``), and a path with no WebSocket route its router's
        (``upgrades.install``). uvicorn's own line of each upgrade, which named its query
        (a listener's token), is left out (service/uvicorn_lines.py)."""
        path = scope["path"]
        if len(path) > 1 and path[-1] == "/":
            scope = without_trailing_slash(scope)
        request_id = request_id_in(scope["headers"])
        started = time.perf_counter()
        status = 0

        async def answering(message: Message) -> None:
            nonlocal status
            if not status and message["type"] in _UPGRADE_ANSWERS:
                status = _UPGRADE_ANSWERS[message["type"]] or message["status"]
                if message["type"] != "websocket.close":  # a bare 403: the server's own
                    message = {**message, "headers": [
                        *((name, value) for name, value in message.get("headers", ())
                          if name.lower() != b"x-request-id"),
                        (b"x-request-id", request_id.encode())]}
                route = _route(scope)
                metrics.count_request(route, status)
                access_log.info("GET %s %s", scope["path"], status, extra=_access_fields(
                    "GET", scope["path"], route, status, started))
            await send(message)

        with log_context(request_id=request_id):
            try:
                await self.app(scope, receive, answering)
            except Exception:
                if not status:
                    access_log.exception("GET %s failed", scope["path"], extra=_access_fields(
                        "GET", scope["path"], _route(scope), 500, started))
                raise

    def _refusal(self, request: Request, added: list[tuple[bytes, bytes]],
                 declared: int | None) -> Response | None:
        """The answer to a request refused before its route (a browser's for another site:
        ``cross_site_refusal``, a bad ``Accept-Version`` or ``x-api-version``, a body over
        the limit by its ``Content-Length``, ``declared``, text no route could store in its
        URL, a bad token), or None: the request goes on, ``added`` gaining ``Api-Version``, and the
        principal is in ``request.state`` and the log scope."""
        cross_site = cross_site_refusal(request.scope, self.public_url)  # first: no change
        if cross_site is not None:
            return errors.api_error_response(cross_site)
        repeated = repeated_header(request)
        if repeated is not None and repeated[0] in VERSION_HEADERS:  # before it is read
            return errors.api_error_response(errors.invalid_parameters(request, [
                {"field": repeated[0], "code": "Invalid", "message": repeated[1]}]))
        try:
            version = negotiate(requested_version(request))
        except InvalidVersionError as error:
            return errors.error_response(request, error)
        request.state.behaviour = behaviour_for(version)
        added.append((b"api-version", version.encode()))
        # after the version: a 413 says which version refused it, as every answer once the
        # version is negotiated (it had no Api-Version: a tester)
        if declared is not None and declared > self.max_body_bytes:
            return errors.api_error_response(errors.PayloadTooLargeError(self.max_body_bytes))
        refused = url_refusal(request, repeated, headers_checked=True)
        if refused is not None:
            return errors.api_error_response(refused)
        try:
            principal = self.tokens.authenticate(routes_changes.stream_authorization(request))
        except errors.UnauthorizedError as error:
            return errors.api_error_response(error)
        request.state.principal = principal
        request.state.actor = principal.name
        bind(actor=principal.name)
        return None


def without_trailing_slash(scope: Scope) -> Scope:
    """``scope`` with one trailing ``/`` of its path dropped: ``/vms/`` is served as ``/vms``,
    as VMAPI's restify serves it (its routing is not strict), where Starlette answered a 307
    whose ``Location`` named the client's ``Host`` (``http://evil.example/vms``) and had no
    error body. A path still not matched is a 404 with the error body."""
    raw = scope.get("raw_path")
    return {**scope, "path": scope["path"][:-1],
            **({"raw_path": raw[:-1]} if raw and raw.endswith(b"/") else {})}


# What a Content-Length of more than 18 digits (leading zeros aside) reads as: more than any
# body limit, where ``int`` would refuse it past 4,300 digits.
_BEYOND_ANY_BODY = 10**18


def _declared_length(header: str | None) -> int | None:
    """The body length a ``Content-Length`` value declares, or None for a value that is not
    a length: ASCII digits only (``str.isdigit`` also takes "²", which ``int`` refuses)."""
    if not (header and header.isascii() and header.isdigit()):
        return None
    digits = header if len(header) <= 18 else header.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else _BEYOND_ANY_BODY


def _limited(receive: Receive, max_bytes: int) -> Receive:
    """``receive`` refusing a body over ``max_bytes`` as it arrives (413 ``PayloadTooLarge``),
    for a body sent without ``Content-Length`` (chunked); one with it is refused up front
    (``Envelope._refusal``), and the server delivers no more than it declares."""
    received = 0

    async def limited() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_bytes:
                # raised inside the route's body read; error_handlers.install maps it to the body
                raise HTTPException(413, f"body over {max_bytes} bytes")
        return message

    return limited


def _route(scope: Scope) -> str:
    """The template of the route that matched (set by the router), or ``unmatched``."""
    return getattr(scope.get("route"), "path", None) or "unmatched"


def _access_fields(method: str, path: str, route: str, status: int, started: float
                   ) -> dict[str, object]:
    """The fields of a request's closing log line (beside the scope's request id, actor, VM
    and job)."""
    return {
        "method": method,
        "path": path,
        "route": route,
        "status": status,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
