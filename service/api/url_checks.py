"""The checks every request's URL gets before any route: text no route could look up or
store, a query parameter given twice; and one of the headers that take one value given twice. The envelope makes them on every HTTP request
(service/api/envelope.py); ``auth.authorize`` on the changefeed's WebSocket upgrade, which
the envelope does not see, before the upgrade is accepted.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

from service.api.errors import ApiError, invalid_parameters
from domain.json_input import at_field, printable, unstorable


def url_refusal(connection: HTTPConnection, repeated: tuple[str, str] | None = None,
                *, headers_checked: bool = False) -> ApiError | None:
    """The ``ValidationFailed`` error naming the first thing wrong with ``connection``'s URL
    (``unstorable_in_url``, then ``repeated_in_query``, then ``repeated_header``, then a
    token given twice: ``token_given_twice``), or None. ``headers_checked``: the caller
    already scanned the headers (``repeated``, the envelope's ``repeated_header``). Its
    top-level message is VMAPI's ``Invalid Parameters``, as every route's own refusal of a
    parameter is."""
    problem = unstorable_in_url(connection)
    if problem is None and b"&" in connection.scope.get("query_string", b""):
        problem = repeated_in_query(connection)  # two parameters or more
    if problem is None:
        problem = repeated if headers_checked else repeated_header(connection)
    if problem is None:
        problem = token_given_twice(connection)
    if problem is None:
        return None
    return invalid_parameters(connection, [
        {"field": problem[0], "code": "Invalid", "message": problem[1]}])


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
        field = printable(name)
        problem = unstorable(name, f"{field} (the key)") or at_field(
            unstorable(value, field), field)
        if problem:
            return field, problem
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


# The headers the service reads that carry one value each: which of two a route (or the
# token check, the version's negotiation, the body's parse, the changefeed's start) should
# take would be a guess, as for a query parameter, so a second one is refused, not ignored.
# (``x-request-id``, never refused, is replaced when repeated: headers.request_id_of.)
SINGLE_HEADERS = {b"authorization": "Authorization", b"if-match": "If-Match",
                  b"idempotency-key": "Idempotency-Key", b"x-context": "x-context",
                  b"accept-version": "Accept-Version", b"x-api-version": "x-api-version",
                  b"last-event-id": "Last-Event-ID",
                  b"content-type": "Content-Type", b"content-length": "Content-Length",
                  # read for curl's rule of the connection (service/api/connection.py)
                  b"user-agent": "User-Agent"}
#: The ones checked before the version is negotiated, which reads them: their refusal has
#: version 1's status (409), no version being known.
VERSION_HEADERS = frozenset(("Accept-Version", "x-api-version"))


def requested_version(request: HTTPConnection) -> str | None:
    """The version range a request asks for: ``Accept-Version``, or ``x-api-version`` when
    that is absent or empty, or None (no range: version 1). VMAPI's restify 4 reads the same
    two headers, in that order (``Request.version``), so a client of it that sends only
    ``x-api-version`` is served the version it names."""
    headers = request.headers
    return headers.get("accept-version") or headers.get("x-api-version")


def repeated_header(request: HTTPConnection) -> tuple[str, str] | None:
    """The first of ``SINGLE_HEADERS`` given more than once, as (field, message), or None."""
    seen: set[bytes] = set()
    for name, _value in request.scope.get("headers", ()):
        if name in SINGLE_HEADERS:
            if name in seen:
                return SINGLE_HEADERS[name], "may be given only once"
            seen.add(name)
    return None


#: ``/changes``' and ``/changefeeds``' token in the URL (a browser's ``EventSource`` and
#: WebSocket cannot send headers).
TOKEN_PARAMETER = "token"
TOKEN_PATHS = frozenset(("/changes", "/changefeeds"))


def token_given_twice(request: HTTPConnection) -> tuple[str, str] | None:
    """(``token``, why) when the request gives a token both in ``Authorization`` and as
    ``?token=``, else None: the header won, and a ``?token=`` the caller may have meant was
    never checked (a tester's ``?token=nope`` with a valid header was answered 200)."""
    if TOKEN_PARAMETER.encode() not in request.scope.get("query_string", b""):
        return None  # cheap: most requests name no token in their query
    if request.scope["path"] not in TOKEN_PATHS:
        return None  # there ``token`` is an unknown parameter, refused as such
    if TOKEN_PARAMETER in request.query_params and "authorization" in request.headers:
        return TOKEN_PARAMETER, ("give the token once: in the Authorization header or as "
                                 "?token=, not both")
    return None
