"""Roles: who may call what (api.md, "Roles"; docs/operations.md, "Tokens and roles").

Who may call what is one table, ``ROUTE_ROLES`` ((method, path template) → roles), enforced by
``authorize`` before every route's handler (``AuthorizedRoute``, the route class of every
router: ``authorized_router``; the changefeed's WebSocket has it as its dependency); a route
missing from the table is refused to everyone but operators, and
``tests/api/test_authorization.py`` walks the app's routes so a route without an entry fails
the suite. Who is calling (the tokens, ``Principal``) is ``service.api.tokens``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response, WebSocketException
from fastapi.routing import APIRoute
from starlette.requests import HTTPConnection

from service.api.bodies import read_json_body, refuse_unread_body
from service.api.cross_site import cross_site_refusal
from service.api.errors import ApiError, ForbiddenError, UnauthorizedError
from service.api.tokens import (
    AGENT,
    ANALYST,
    AUDITOR,
    OPEN,
    OPERATOR,
    OWNER,
    ROLES,
    Principal,
)
from service.api.url_checks import url_refusal
from service.logs import bind

# An owner_uuid no VM can have (owner uuids are validated UUIDs): an owner token that asks
# for another owner's VMs is scoped to this, so it sees nothing (404, an empty list, zeros).
NOBODY = "nobody"

_ALL = frozenset(ROLES)
_READERS = frozenset({OPERATOR, AUDITOR})                 # every read
_VM_READERS = frozenset({OPERATOR, AUDITOR, OWNER})       # VM reads (owners: their own)
# List reads, and the read of one of what they list (an analyst may read one server, volume,
# network or job, which its list gives whole, but not one VM: GetVm also answers the VM's past,
# ``?version=`` and ``?at=``, and ``GET /vms?uuid=`` gives the VM as it is now)
_LISTERS = frozenset({OPERATOR, AUDITOR, ANALYST})
_VM_LISTERS = frozenset({OPERATOR, AUDITOR, ANALYST, OWNER})
_VM_WRITERS = frozenset({OPERATOR, OWNER})
_AGENTS = frozenset({OPERATOR, AGENT})
_OPERATORS = frozenset({OPERATOR})

ROUTE_ROLES: dict[tuple[str, str], frozenset[str]] = {
    ("GET", "/ping"): _ALL,
    ("GET", "/metrics"): _LISTERS,
    ("GET", "/vms"): _VM_LISTERS,
    ("HEAD", "/vms"): _VM_LISTERS,
    ("GET", "/vms/{vm_uuid}"): _VM_READERS,
    ("POST", "/vms"): _VM_WRITERS,
    ("POST", "/vms/{vm_uuid}"): _VM_WRITERS,      # quarantine/release: ACTION_ROLES
    ("DELETE", "/vms/{vm_uuid}"): _VM_WRITERS,
    ("PUT", "/vms/{vm_uuid}"): _AGENTS,
    ("PUT", "/vms"): _AGENTS,
    ("GET", "/vms/{vm_uuid}/history"): _VM_READERS,
    # Owners get their own VMs' changes only (service/changes/filters.py).
    ("GET", "/changes"): _VM_READERS,
    ("GET", "/changefeeds"): _VM_READERS,
    ("GET", "/changefeeds/stats"): _READERS,
    ("GET", "/vms/{vm_uuid}/jobs"): _VM_READERS,
    ("GET", "/jobs"): _VM_LISTERS,
    ("GET", "/jobs/{job_uuid}"): _VM_LISTERS,
    # the job read, answered when the job ends: the same roles (an analyst was refused it)
    ("GET", "/jobs/{job_uuid}/wait"): _VM_LISTERS,
    ("GET", "/servers"): _LISTERS,
    ("GET", "/servers/{server_uuid}"): _LISTERS,
    ("POST", "/servers"): _OPERATORS,
    ("POST", "/servers/{server_uuid}"): _OPERATORS,
    ("GET", "/volumes"): _LISTERS,
    ("GET", "/volumes/{volume_uuid}"): _LISTERS,
    ("POST", "/volumes"): _OPERATORS,
    ("POST", "/volumes/{volume_uuid}"): _OPERATORS,
    ("GET", "/networks"): _LISTERS,
    ("GET", "/networks/{network_uuid}"): _LISTERS,
    ("POST", "/networks"): _OPERATORS,
    # Owners get /stats scoped to their own VMs (owner_uuid forced, as on every route).
    ("GET", "/stats/states"): _VM_LISTERS,
    ("GET", "/stats/transitions"): _VM_LISTERS,
    ("GET", "/stats/durations"): _VM_LISTERS,
    ("GET", "/stats/failures"): _VM_LISTERS,
    ("GET", "/stats/stuck"): _VM_LISTERS,
    ("GET", "/sim"): _READERS,
    ("POST", "/sim/faults"): _OPERATORS,
    ("DELETE", "/sim/faults"): _OPERATORS,
    ("PUT", "/sim/latency"): _OPERATORS,
    ("POST", "/sim/workers"): _OPERATORS,
    ("POST", "/sim/servers/{server_uuid}"): _OPERATORS,
    ("POST", "/sim/vms/{vm_uuid}"): _OPERATORS,
    # The web console's fragments (service/console/; its pages and assets need no token).
    ("GET", "/console/fragments/session"): _ALL,
    ("GET", "/console/fragments/fleet"): _VM_LISTERS,
    ("GET", "/console/fragments/fleet/chart"): _VM_LISTERS,
    ("GET", "/console/fragments/servers"): _LISTERS,
    ("GET", "/console/fragments/vms/{vm_uuid}"): _VM_READERS,
    ("GET", "/console/fragments/vms/{vm_uuid}/state"): _VM_READERS,
    ("GET", "/console/fragments/vms/{vm_uuid}/diff"): _VM_READERS,
    ("GET", "/console/fragments/audit"): _READERS,
    ("POST", "/console/fragments/audit"): _READERS,
}

#: The (list route, role) pairs whose role may list but not read one of what it lists, and
#: why; every other GET list route and its item route (``/x`` and ``/x/{x_uuid}``) allow the
#: same roles (tests/api/test_authorization.py walks the table).
LIST_ONLY: dict[tuple[str, str], str] = {
    ("/vms", ANALYST): "GetVm also answers the VM's past (?version=, ?at=), which an analyst "
                       "does not read; GET /vms?uuid= gives the VM as it is now",
}

# Narrower roles for some ``?action=`` values of a route.
ACTION_ROLES: dict[tuple[str, str], dict[str, frozenset[str]]] = {
    ("POST", "/vms/{vm_uuid}"): {"quarantine": _OPERATORS, "release": _OPERATORS},
}


def principal_of(request: HTTPConnection) -> Principal:
    """The caller (set by the app's middleware; an open-mode operator if unset)."""
    return getattr(request.state, "principal", OPEN)


def roles_for(method: str, path: str, action: str | None = None) -> frozenset[str]:
    """The roles allowed on a route (operators only for a route the table lacks)."""
    roles = ROUTE_ROLES.get((method, path), _OPERATORS)
    if action is not None:
        roles = ACTION_ROLES.get((method, path), {}).get(action, roles)
    return roles


async def authorize(request: HTTPConnection) -> None:
    """Refuse (403 ``Forbidden``) a caller whose role the route's entry in ``ROUTE_ROLES``
    does not allow: called before every HTTP route's handler (``AuthorizedRoute``), and the
    changefeed's WebSocket dependency. A WebSocket (whose checks the envelope does not make)
    gets them here (``upgrading_principal``), then its role is checked as ``GET``'s: each
    refused before the upgrade as an HTTP request is (``websocket_refusal``).

    An allowed request's ``vm_uuid`` and ``job_uuid`` of the route's path then go into its log
    scope (service/logs.py), so its lines, the closing one included, carry them."""
    route = request.scope.get("route")
    path = getattr(route, "path", None) or request.scope["path"]
    if request.scope["type"] == "websocket":
        principal = upgrading_principal(request)
        if principal.role not in roles_for("GET", path):
            raise websocket_refusal(request, ForbiddenError(
                f"role {principal.role} may not GET {path}"))
        _bind_path_ids(request)
        return
    assert isinstance(request, Request)
    authorize_action(request, request.query_params.get("action"))
    _bind_path_ids(request)


def authorize_action(request: Request, action: str | None) -> None:
    """Refuse (403 ``Forbidden``) a caller whose role may not take ``action`` on the request's
    route (``ACTION_ROLES``, else the route's ``ROUTE_ROLES``). ``authorize`` checks the
    query's action before the body is read; a route that also takes its action from the
    body (``action_params.action_of``: VMAPI maps both) checks the action it takes again,
    or an owner's ``{"action": "quarantine"}`` passed as an action owners may take (a
    tester quarantined and released another owner's VM so)."""
    route = request.scope.get("route")
    path = getattr(route, "path", None) or request.scope["path"]
    principal = principal_of(request)
    if principal.role not in roles_for(request.method, path, action):
        # Name the action when it is what narrowed the route (owners may POST other actions)
        narrowed = action is not None and action in ACTION_ROLES.get((request.method, path), {})
        what = f"{path}?action={action}" if narrowed else path
        raise ForbiddenError(f"role {principal.role} may not {request.method} {what}")


def upgrading_principal(request: HTTPConnection) -> Principal:
    """Who asks for a WebSocket upgrade, checked as the envelope checks an HTTP request
    before its route (which it does not see): its site (``cross_site_refusal``: 403) and URL
    (``url_refusal``: 409 ``ValidationFailed``), then its token, by its ``Authorization``
    header or ``?token=`` (401), each raising ``websocket_refusal``. The principal goes into
    ``request.state`` and its name into the log scope (the upgrade's access line's
    ``actor``)."""
    # as the envelope refuses an HTTP request for another site, and its URL
    public_url = request.app.state.services.settings.public_url
    refused = cross_site_refusal(request.scope, public_url) or url_refusal(request)
    if refused is not None:
        raise websocket_refusal(request, refused)
    header = request.headers.get("authorization")
    token = request.query_params.get("token")
    try:
        principal = request.app.state.tokens.authenticate(
            header if header is not None or not token else f"Bearer {token}")
    except UnauthorizedError as error:
        raise websocket_refusal(request, error) from None
    request.state.principal = principal
    bind(actor=principal.name)
    return principal


def websocket_refusal(connection: HTTPConnection, error: ApiError) -> Exception:
    """What refuses a WebSocket upgrade: ``error`` itself where the server can answer the
    handshake with an HTTP response (the ASGI ``websocket.http.response`` extension, which
    uvicorn has), so the app's error handler answers it as every route's refusal (401 with
    ``WWW-Authenticate``, 403, 409 ``ValidationFailed`` naming the field, the error body);
    else a close with code 1008 and its message (the first field's, if it names fields),
    which the server sends as a bare 403."""
    if "websocket.http.response" in connection.scope.get("extensions", {}):
        return error
    fields = error.extra.get("errors") or []
    reason = f"{fields[0]['field']}: {fields[0]['message']}" if fields else error.message
    return WebSocketException(1008, close_reason(reason))


CLOSE_REASON_BYTES = 123  # what a WebSocket close frame carries (RFC 6455, 5.5) of UTF-8


def close_reason(text: str, tail: str = "") -> str:
    """``text`` then ``tail`` as a WebSocket close reason, within ``CLOSE_REASON_BYTES``:
    when they do not fit, ``text`` is cut after its last whole word that does, marked "…",
    and ``tail`` (what the listener acts on: the position to resume after) is kept whole.
    (Cutting at a byte count left half words: "waiting to be sent; resu".)"""
    room = CLOSE_REASON_BYTES - len(tail.encode())
    if len(text.encode()) <= room:
        return text + tail
    kept = text.encode()[:room - len("…".encode())].decode(errors="ignore")
    if not text[len(kept)].isspace():  # the cut fell inside a word: leave the word out
        kept = kept[:max(kept.rfind(" "), 0)]
    return kept.rstrip(" ;,:") + "…" + tail


def _bind_path_ids(request: HTTPConnection) -> None:
    params = request.path_params
    bind(vm_uuid=params.get("vm_uuid"), job_uuid=params.get("job_uuid"))


def scoped_owner(request: Request, asked: str | None) -> str | None:
    """The ``owner_uuid`` a request is scoped to: what it asked for, except that an owner token
    is always scoped to its own owner (asking for another owner's yields ``NOBODY``, which
    matches nothing, so others' VMs are 404 and absent from lists)."""
    principal = principal_of(request)
    if principal.role != OWNER:
        return asked
    if asked is not None and asked != principal.owner_uuid:
        return NOBODY
    return principal.owner_uuid


def visible_owner(request: Request) -> str | None:
    """The owner whose VMs alone the request may see: an owner token's own (another owner's
    VM, and its own once quarantined, are 404 to it); None for every other role, which may
    see every VM. A read that looks a VM up by a uuid the client gave (a ListVms marker)
    treats any other VM as no VM."""
    principal = principal_of(request)
    return principal.owner_uuid if principal.role == OWNER else None


def require_owner(request: Request, owner_uuid: str) -> None:
    """An owner token creates VMs for its own owner only (403 otherwise)."""
    principal = principal_of(request)
    if principal.role == OWNER and owner_uuid != principal.owner_uuid:
        raise ForbiddenError("an owner token creates VMs only for its own owner_uuid")


def require_server(request: Request, server_uuid: str | None) -> None:
    """An agent token reports only for its own server (403 otherwise)."""
    principal = principal_of(request)
    if principal.role == AGENT and server_uuid != principal.server_uuid:
        raise ForbiddenError("an agent token reports only for its own server "
                             f"({principal.server_uuid})")


class AuthorizedRoute(APIRoute):
    """A FastAPI route whose handler first calls ``authorize``, before the body is read or
    any parameter solved. It was an app-wide dependency, which FastAPI solved on every
    request with a nested solve of its own (four parameter lookups, a cache key): 3-4 % of a
    command's CPU (docs/performance.md, "The batch as one query"). Its refusal is raised
    inside the route's handler, so the app's exception handlers answer it as before. A route
    that reads a body has it parsed strictly first (``bodies.read_json_body``); one that reads
    none refuses one sent to it (``bodies.refuse_unread_body``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        reads_body = self.body_field is not None

        async def authorized(request: Request) -> Response:
            await authorize(request)
            if reads_body:
                await read_json_body(request)
            else:  # refused, not ignored: it may say what the route did not do
                await refuse_unread_body(request)
            return await handler(request)

        return authorized


def authorized_router(**kwargs: Any) -> APIRouter:
    """An ``APIRouter`` (``kwargs`` as its) whose routes are ``AuthorizedRoute``s: every
    router of the app is one (``create_app`` refuses to serve a route that is not)."""
    return APIRouter(route_class=AuthorizedRoute, **kwargs)
