"""The checks every request's URL gets before any route: text no route could look up or
store, a query parameter given twice. The envelope makes them on every HTTP request
(service/api/envelope.py); ``auth.authorize`` on the changefeed's WebSocket upgrade, which
the envelope does not see, before the upgrade is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute, Match, Router

from service.api.errors import ApiError, invalid_parameters
from domain.json_input import printable, unstorable


def url_refusal(connection: HTTPConnection, router: Router | None = None) -> ApiError | None:
    """The ``ValidationFailed`` error naming the first thing wrong with ``connection``'s URL
    (``unstorable_in_url``, then ``repeated_in_query``), or None. Its top-level message is
    that of the route of ``router`` the request goes to (``refused_as``), or the default."""
    problem = unstorable_in_url(connection)
    if problem is None and b"&" in connection.scope.get("query_string", b""):
        problem = repeated_in_query(connection)  # two parameters or more
    if problem is None:
        return None
    message = refusal_message(router, connection.scope) if router is not None else None
    return invalid_parameters(connection, [
        {"field": problem[0], "code": "Invalid", "message": problem[1]}], message=message)


#: The attribute of a route's endpoint naming the top-level message of its refused query
#: parameters, where it is not ``invalid_parameters``' default (``refused_as``).
_MESSAGE_ATTRIBUTE = "invalid_parameters_message"

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def refused_as(message: str) -> Callable[[Endpoint], Endpoint]:
    """Mark a route's endpoint with the top-level ``message`` of its bad query parameters
    (ListVms' is VMAPI's "Invalid Parameters"), so a refusal of its URL, made before the
    route runs, says what the route's own refusals say."""
    def mark(endpoint: Endpoint) -> Endpoint:
        setattr(endpoint, _MESSAGE_ATTRIBUTE, message)
        return endpoint
    return mark


def refusal_message(router: Router, scope: Any) -> str | None:
    """The top-level message the route of ``router`` that ``scope`` goes to gives bad query
    parameters (``refused_as``), or None for the default (no such route, or one with no
    message of its own)."""
    for route in _routes(router.routes):
        if route.matches(scope)[0] is Match.FULL:
            return getattr(getattr(route, "endpoint", None), _MESSAGE_ATTRIBUTE, None)
    return None


def _routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """Every route of ``routes``, those of an included router too: FastAPI keeps an
    ``include_router``'s routes behind one route of the app's (its ``original_router``), whose
    match says nothing of the route that matched."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes)
        else:
            yield route


def unstorable_in_url(request: HTTPConnection) -> tuple[str, str] | None:
    """The first path or query text no route could look up or store (a NUL character:
    PostgreSQL's text refuses it), as (field, message), or None."""
    if "\x00" in request.scope["path"]:
        return "path", "the path may not contain the NUL character"
    query = request.scope.get("query_string")
    # Decoded, a query holds NUL only from "%00" or a raw NUL (undecodable bytes become
    # U+FFFD, never a lone surrogate): without either, none of its text is refused.
    if not query or (b"%00" not in query and b"\x00" not in query):
        return None
    for name, value in request.query_params.multi_items():
        problem = unstorable({name: value})
        if problem:
            return printable(name), problem
    return None


def repeated_in_query(request: HTTPConnection) -> tuple[str, str] | None:
    """The first query parameter given more than once, as (field, message), or None. Every
    parameter of ours takes one value (a list is one comma-separated value, as VMAPI's
    ``uuids``): which of two a route should take would be a guess."""
    seen: set[str] = set()
    for name, _value in request.query_params.multi_items():
        if name in seen:
            return printable(name), "may be given only once"
        seen.add(name)
    return None
