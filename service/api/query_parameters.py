"""What query parameters a route takes, declared once: the same object is the route's
``openapi_extra`` (so ``/openapi.json`` declares each parameter: name, whether required, its
type and a one-line description) and the names its parsing accepts (``parse``, a
``params.Query`` that refuses any other name in VMAPI's words). The schema cannot leave out
a parameter the route takes, nor declare one it refuses (docs/api.md, "OpenAPI schema";
``tests/api/test_openapi_parameters.py`` walks every route).

The request headers a command reads (``If-Match``, ``Idempotency-Key``, ``x-context``) are
declared the same way (``Param(..., where="header")``), and reading one a route does not
declare raises (``check_declared_header``); those of every operation are added by
service/api/openapi.py.

A route declares ``openapi_extra=SPEC`` and parses with ``SPEC.parse(request)``; a route
whose parameters depend on what is asked (the actions of ``POST /vms/{uuid}``) declares the
union of its parts (``a | b``) and parses with the part the request needs. ``parse`` refuses
(a programming error, 500) a spec that is not its route's, so no route can parse by names
its schema does not show.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from projections.formats import MAX_INTEGER
from service.api.params import COMMON, MAX_LIMIT, Query

UUID: Mapping[str, Any] = {"type": "string", "format": "uuid"}
BOOLEAN: Mapping[str, Any] = {"type": "boolean"}
TEXT: Mapping[str, Any] = {"type": "string"}
#: An RFC 3339 instant with its time zone (GetVm's and the console's ``?at=``)
INSTANT: Mapping[str, Any] = {"type": "string", "format": "date-time"}


def integer(minimum: int, maximum: int = MAX_INTEGER) -> dict[str, Any]:
    """The schema of an integer parameter from ``minimum`` to ``maximum``."""
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def one_of(values: Iterable[str]) -> dict[str, Any]:
    """The schema of a text parameter that is one of ``values`` (listed in this order)."""
    return {"type": "string", "enum": list(values)}


@dataclass(frozen=True)
class Param:
    """One parameter a route takes: its name, a one-line description, its JSON schema
    (``TEXT`` unless told), whether it is required and where it is (``query`` or
    ``header``: a header is declared, never a query name)."""

    name: str
    description: str
    schema: Mapping[str, Any] = field(default_factory=lambda: dict(TEXT))
    required: bool = False
    where: str = "query"

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI parameter object."""
        return {"name": self.name, "in": self.where, "required": self.required,
                "description": self.description, "schema": dict(self.schema)}


#: Accepted by every route that parses its query (``params.COMMON``)
CONSISTENCY = Param("consistency", "eventual: answer without waiting for the read models to "
                    "reach this client's last write (default: strong; a read's only)",
                    one_of(("strong", "eventual")))


def owner(description: str) -> Param:
    """``owner_uuid``, as the route takes it (an owner's token is always scoped to its own)."""
    return Param("owner_uuid", f"{description} (an owner's token is always scoped to its own)",
                 UUID)


OWNER = owner("the VMAPI client's owner scoping: what another owner has is not found")
LIMIT = Param("limit", f"at most this many (default and maximum {MAX_LIMIT})",
              integer(1, MAX_LIMIT))
OFFSET = Param("offset", "skip this many first", integer(0))
#: A VM path's owner scoping, and its time travel (GetVm's, and the console's VM state,
#: which shows exactly what GetVm answers)
OWNERS_VM = owner("another owner's VM is not found")
AS_IT_WAS = (
    Param("version", "the VM as it was at this version (not with at)", integer(1)),
    Param("at", "the VM as it was at this RFC 3339 instant, with its time zone (not with "
          "version)", INSTANT),
)


class QueryParameters(dict[str, Any]):
    """A route's query parameters: its ``openapi_extra`` (``{"parameters": [...]}``, and
    whatever ``extra`` adds), ``names`` (what its parsing accepts: the declared query
    parameters, ``consistency`` and ``owner_uuid``, and ``undeclared``) and ``parse``.

    ``undeclared`` names parameters the parsing takes only to refuse them in words of their
    own (ListVms' ``predicate``); ``prefixes`` the families no OpenAPI parameter can name
    (ListVms' ``tag.K``), which the route's description tells of. ``ignored()``: a route
    that reads no query at all (any parameter is ignored), so declares none. ``scoped=False``:
    a route no owner scopes (the agents' reports: what a server saw, whoever owns it), which
    refuses ``owner_uuid`` as any parameter it does not take, where it was validated and
    then ignored (a tester; api.md, "Compute agents")."""

    def __init__(self, *params: Param, prefixes: tuple[str, ...] = (),
                 undeclared: Iterable[str] = (), extra: Mapping[str, Any] | None = None,
                 parts: tuple[QueryParameters, ...] = (), common: bool = True,
                 owner_in_any_case: bool = False, scoped: bool = True):
        # what every parsed query takes (params.COMMON), unless the route says it its way
        given = {p.name for p in params}
        common_params = [p for p in (CONSISTENCY, OWNER)
                         if common and p.name in COMMON and p.name not in given
                         and (scoped or p is not OWNER)]
        self.scoped = scoped
        self.params: tuple[Param, ...] = (*params, *common_params)
        self.prefixes = prefixes
        self.owner_in_any_case = owner_in_any_case
        self.undeclared = frozenset(undeclared)
        self.declared = frozenset(p.name for p in self.params if p.where == "query")
        self.headers = frozenset(p.name.lower() for p in self.params if p.where == "header")
        self.names = self.declared | self.undeclared
        self.parts = parts
        super().__init__({"parameters": [p.openapi() for p in self.params]} if self.params
                         else {}, **(extra or {}))

    @classmethod
    def ignored(cls) -> QueryParameters:
        """The declaration of a route that never reads its query (``/ping``, ``/metrics``)."""
        return cls(common=False)

    def __or__(self, other: object) -> QueryParameters:
        """The union of two routes' or actions' parameters (the first one's of a name)."""
        if not isinstance(other, QueryParameters):
            return NotImplemented
        seen = {p.name for p in self.params}
        return QueryParameters(*self.params, *(p for p in other.params if p.name not in seen),
                               prefixes=self.prefixes + other.prefixes,
                               undeclared=self.undeclared | other.undeclared,
                               parts=(*(self.parts or (self,)), *(other.parts or (other,))),
                               scoped=self.scoped and other.scoped)

    def parse(self, request: Request) -> Query:
        """The request's query, refusing (on ``check``) any name but ``names``. Raises
        ``RuntimeError`` when this is not the declaration of the route serving ``request``
        (nor one of its parts): its schema would not show what is parsed. A request no
        route matched (built by hand) is parsed as declared."""
        route = request.scope.get("route")  # None: a request no router matched (a test's)
        declared = getattr(route, "openapi_extra", None)
        if route is not None and declared is not self and not (
                isinstance(declared, QueryParameters)
                and any(part is self for part in declared.parts)):
            raise RuntimeError(f"{getattr(route, 'path', '?')} parses a query it does not "
                               "declare: give the route openapi_extra=<its QueryParameters>")
        return Query(request, self.names, prefixes=self.prefixes,
                     owner_in_any_case=self.owner_in_any_case, scoped=self.scoped)


def check_declared_header(request: Request, name: str) -> None:
    """Raise ``RuntimeError`` (a programming error, 500) when the route serving ``request``
    reads the header ``name`` without declaring it: its schema would not show it. Called by
    what reads a command's own headers (``deps.if_match_of``, ``deps.idempotency_of``, the
    VM commands' ``x-context``), so every test of a command route checks its declaration. A
    request no route matched (built by hand) is not checked."""
    route = request.scope.get("route")
    if route is None:
        return
    declared = getattr(route, "openapi_extra", None)
    if not isinstance(declared, QueryParameters) or name.lower() not in declared.headers:
        raise RuntimeError(f"{getattr(route, 'path', '?')} reads the header {name} it does "
                           "not declare: add it to the route's openapi_extra")


#: A command's own request headers (docs/api.md, "Commands"), declared by every command route
IF_MATCH = Param("If-Match", 'the version the aggregate must be at ("7", 7 or W/"7"), or * '
                 "for any: another version is 412 PreconditionFailed and changes nothing",
                 where="header")
IDEMPOTENCY_KEY = Param("Idempotency-Key", "1 to 255 characters, scoped to the caller: the "
                        "same request sent again with it is answered as the first was; "
                        "another request with it is 422 IdempotencyKeyReused",
                        where="header")
COMMAND_HEADERS = (IF_MATCH, IDEMPOTENCY_KEY)
#: The VM commands' too
X_CONTEXT = Param("x-context", "JSON kept in the params.context of the job the command "
                  "queues (CreateVm, DeleteVm, and every action but quarantine and release, "
                  "which queue none and do not read it; at most 4096 bytes; text that is not "
                  "JSON is kept as {\"raw\": text}); a body's context that differs is "
                  "ConflictingParameters", where="header")
#: Every operation's (added to each by service/api/openapi.py)
EVERY_OPERATION_HEADERS = (
    Param("Accept-Version", "the API version, a node-semver range: none or * is version 1 "
          "(VMAPI's behaviour), ~2 is version 2; one that matches no version is 400 "
          "InvalidVersion", where="header"),
    Param("x-api-version", "the same, read only when Accept-Version is absent or empty (as "
          "VMAPI's restify reads it)", where="header"),
    Param("x-request-id", "the request's id (1 to 128 printable ASCII characters), echoed "
          "in the answer and recorded in the cause of every event it appends; one is made "
          "when it is absent or any other value", where="header"),
)
