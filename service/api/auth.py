"""Bearer tokens and roles (api.md, "Roles"; docs/operations.md, "Tokens and roles").

Tokens are configured in ``VMLEDGER_TOKENS_FILE`` or, as JSON, in ``VMLEDGER_TOKENS`` (one or
the other, never both: ``Settings`` refuses that): one entry per token with its ``name``,
``role``, ``owner_uuid`` (owner) or ``server_uuid`` (agent) and the token's SHA-256 (never the
token itself). A presented token is hashed and compared with every configured hash in constant
time (``hmac.compare_digest``). With no tokens configured the service runs in open local mode:
every caller is an ``operator`` named ``anonymous`` (and ``serve`` listens on loopback only).

Who may call what is one table, ``ROUTE_ROLES`` ((method, path template) → roles), enforced by
``authorize``, an app-wide dependency; a route missing from the table is refused to everyone
but operators, and ``tests/api/test_authorization.py`` walks the app's routes so a route without
an entry fails the suite.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import tomllib
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request, WebSocketException
from starlette.requests import HTTPConnection

from service.api.errors import ForbiddenError, UnauthorizedError
from service.settings import Settings

OPERATOR, OWNER, AGENT, AUDITOR, ANALYST = "operator", "owner", "agent", "auditor", "analyst"
ROLES = (OPERATOR, OWNER, AGENT, AUDITOR, ANALYST)

# An owner_uuid no VM can have (owner uuids are validated UUIDs): an owner token that asks
# for another owner's VMs is scoped to this, so it sees nothing (404, an empty list, zeros).
NOBODY = "nobody"

_ALL = frozenset(ROLES)
_READERS = frozenset({OPERATOR, AUDITOR})                 # every read
_VM_READERS = frozenset({OPERATOR, AUDITOR, OWNER})       # VM reads (owners: their own)
_LISTERS = frozenset({OPERATOR, AUDITOR, ANALYST})        # list reads
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
    ("GET", "/jobs/{job_uuid}"): _VM_READERS,
    ("GET", "/jobs/{job_uuid}/wait"): _VM_READERS,
    ("GET", "/servers"): _LISTERS,
    ("GET", "/servers/{server_uuid}"): _READERS,
    ("POST", "/servers"): _OPERATORS,
    ("POST", "/servers/{server_uuid}"): _OPERATORS,
    ("GET", "/volumes"): _LISTERS,
    ("GET", "/volumes/{volume_uuid}"): _READERS,
    ("POST", "/volumes"): _OPERATORS,
    ("POST", "/volumes/{volume_uuid}"): _OPERATORS,
    ("GET", "/networks"): _LISTERS,
    ("GET", "/networks/{network_uuid}"): _READERS,
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

# Narrower roles for some ``?action=`` values of a route.
ACTION_ROLES: dict[tuple[str, str], dict[str, frozenset[str]]] = {
    ("POST", "/vms/{vm_uuid}"): {"quarantine": _OPERATORS, "release": _OPERATORS},
}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name (the events' ``cause.actor``), its role, and what it is
    bound to (an owner's ``owner_uuid``, an agent's ``server_uuid``)."""

    name: str
    role: str
    owner_uuid: str | None = None
    server_uuid: str | None = None


OPEN = Principal("anonymous", OPERATOR)


class TokenFileError(ValueError):
    """The configured tokens (the file, or ``VMLEDGER_TOKENS``) cannot be used; the message
    names the source, the entry and the problem."""


@dataclass(frozen=True)
class _Token:
    digest: bytes
    principal: Principal


class Tokens:
    """The configured tokens (by SHA-256); empty means open local mode."""

    def __init__(self, entries: list[_Token]):
        self._entries = entries

    @property
    def open(self) -> bool:
        """No tokens configured: every caller is an anonymous operator."""
        return not self._entries

    @classmethod
    def from_settings(cls, settings: Settings) -> Tokens:
        """The tokens of ``VMLEDGER_TOKENS`` (JSON) or of ``VMLEDGER_TOKENS_FILE``; none
        configured is open local mode. Raises ``TokenFileError`` naming the source, the entry
        and the problem."""
        if settings.tokens is not None:
            return cls.from_json(settings.tokens, source="VMLEDGER_TOKENS")
        return cls.load(settings.tokens_file)

    @classmethod
    def load(cls, path: Path | None) -> Tokens:
        """Read a tokens file: TOML (``[[tokens]]`` tables) or, for a ``.json`` file, a JSON
        list of objects. Raises ``TokenFileError`` naming the bad entry."""
        if path is None:
            return cls([])
        source = f"tokens file {path}"
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise TokenFileError(f"{source}: {error}") from None
        if str(path).endswith(".json"):
            return cls.from_json(text, source=source)
        try:
            entries = tomllib.loads(text).get("tokens", [])
        except ValueError as error:
            raise TokenFileError(f"{source}: {error}") from None
        return cls._build(entries, source, expected="[[tokens]] entries")

    @classmethod
    def from_json(cls, text: str, *, source: str) -> Tokens:
        """Tokens from JSON text: a list of entry objects (or ``{"tokens": [...]}``), as in a
        ``.json`` tokens file. Raises ``TokenFileError`` starting with ``source``."""
        if not text.strip():
            raise TokenFileError(f"{source}: is empty (unset it for open local mode, or give "
                                 "a JSON list of token entries)")
        try:
            raw = json.loads(text)
        except ValueError as error:
            raise TokenFileError(f"{source}: not valid JSON ({error}); expected a JSON list "
                                 "of token entries") from None
        entries = raw.get("tokens", []) if isinstance(raw, dict) else raw
        return cls._build(entries, source, expected="a JSON list of token entries")

    @classmethod
    def _build(cls, entries: Any, source: str, *, expected: str) -> Tokens:
        if not isinstance(entries, list) or not entries:
            raise TokenFileError(f"{source}: no tokens (expected {expected})")
        try:
            tokens = [_parse(entry, i) for i, entry in enumerate(entries)]
        except TokenFileError as error:
            raise TokenFileError(f"{source}: {error}") from None
        names = [t.principal.name for t in tokens]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TokenFileError(f"{source}: duplicate names {duplicates}")
        return cls(tokens)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer <token>`` header; raises
        ``UnauthorizedError`` when it is missing or matches no configured token."""
        if self.open:
            return OPEN
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise UnauthorizedError("a bearer token is required (Authorization: Bearer ...)")
        digest = hashlib.sha256(presented.strip().encode()).digest()
        found: Principal | None = None
        for entry in self._entries:  # every entry compared: time does not depend on which
            if hmac.compare_digest(digest, entry.digest):
                found = entry.principal
        if found is None:
            raise UnauthorizedError("unknown token")
        return found


def _parse(entry: Any, index: int) -> _Token:
    where = f"token #{index + 1}"
    if not isinstance(entry, dict):
        raise TokenFileError(f"{where}: must be a table/object")
    unknown = set(entry) - {"name", "role", "sha256", "owner_uuid", "server_uuid"}
    if unknown:
        raise TokenFileError(f"{where}: unknown fields {sorted(unknown)}")
    name, role, digest = entry.get("name"), entry.get("role"), entry.get("sha256")
    if not isinstance(name, str) or not name:
        raise TokenFileError(f"{where}: name is required")
    where = f"token {name!r}"
    if role not in ROLES:
        raise TokenFileError(f"{where}: role must be one of {', '.join(ROLES)}")
    try:
        raw = bytes.fromhex(digest) if isinstance(digest, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise TokenFileError(f"{where}: sha256 must be the token's SHA-256, 64 hex digits")
    bound = {"owner": "owner_uuid", "agent": "server_uuid"}.get(role)
    for field in ("owner_uuid", "server_uuid"):
        if field in entry and field != bound:
            raise TokenFileError(f"{where}: {field} is only for role "
                                 f"{'owner' if field == 'owner_uuid' else 'agent'}")
    values: dict[str, str] = {}
    if bound is not None:
        try:
            values[bound] = str(uuidlib.UUID(str(entry.get(bound))))
        except ValueError:
            raise TokenFileError(f"{where}: {bound} (a UUID) is required for role {role}") \
                from None
    return _Token(raw, Principal(name, role, **values))


def new_token() -> tuple[str, str]:
    """A fresh random token and its SHA-256 (hex): the token goes to the caller, the hash to
    the tokens file."""
    token = secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()


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
    """The app-wide dependency: refuse (403 ``Forbidden``) a caller whose role the route's
    entry in ``ROUTE_ROLES`` does not allow. A WebSocket (Triton's changefeed, which the HTTP
    middleware does not see) is authenticated here, by its ``Authorization`` header or
    ``?token=``, as ``GET``, and refused with close code 1008. Async (it does no I/O), so
    FastAPI calls it on the event loop rather than with a thread-pool hop on every request."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    if request.scope["type"] == "websocket":
        header = request.headers.get("authorization")
        token = request.query_params.get("token")
        try:
            principal = request.app.state.tokens.authenticate(
                header if header is not None or not token else f"Bearer {token}")
        except UnauthorizedError as error:
            raise WebSocketException(1008, error.message) from None
        request.state.principal = principal
        if principal.role not in roles_for("GET", path):
            raise WebSocketException(1008, f"role {principal.role} may not GET {path}")
        return
    assert isinstance(request, Request)
    principal = principal_of(request)
    action = request.query_params.get("action")
    allowed = roles_for(request.method, path, action)
    if principal.role not in allowed:
        # Name the action when it is what narrowed the route (owners may POST other actions)
        narrowed = action is not None and action in ACTION_ROLES.get((request.method, path), {})
        what = f"{path}?action={action}" if narrowed else path
        raise ForbiddenError(f"role {principal.role} may not {request.method} {what}")


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
