"""GET /changes: the log as Server-Sent Events, resumable from any position (docs/api.md,
"Changes")."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.requests import HTTPConnection

from service.api.auth import OWNER, authorized_router, principal_of
from service.api.errors import UnavailableError
from service.api.params import MAX_INTEGER, Query, integer_param
from service.api.query_parameters import Param, QueryParameters, integer
from service.api.url_checks import TOKEN_PARAMETER, TOKEN_PATHS
from service.append_wakeups import wake_on_appends
from service.changes import sse
from service.changes.filters import ChangeFilter, checked_value, listed_values
from service.changes.hub import ChangeHub, HubLimits, TooManyStreamsError

router = authorized_router()
log = logging.getLogger(f"vmledger.{__name__}")

# How long a shutdown waits for the change streams it ended to close (a stream whose client
# does not read may not get its end out); then the server closes what is left.
STREAMS_END_S = 5.0


def change_hub(connection: HTTPConnection) -> ChangeHub:
    """The app's ``ChangeHub``, made on first use: woken by this process's appends and, on
    PostgreSQL, by every process's (``wake_on_appends``)."""
    state = connection.app.state
    hub = getattr(state, "change_hub", None)
    if hub is None:
        services = state.services
        hub = state.change_hub = ChangeHub(services.app,
                                           HubLimits.from_settings(services.settings))
        services.commands.after_save.append(hub.wake)
        wake_on_appends(services.app.recorder, hub.wake, hub.stopping)
    return hub


async def end_change_streams(state: object) -> None:
    """End the app's change streams, each with its position, and wait up to
    ``STREAMS_END_S`` for them to close: before the server closes the connections itself
    (``serving.StreamEndingServer``), which would cut a WebSocket with no position."""
    hub = getattr(state, "change_hub", None)
    if hub is not None and not await hub.end_streams(STREAMS_END_S):
        log.warning("changefeed: some change streams were still open %.0f s after the "
                    "shutdown ended them (a client not reading)", STREAMS_END_S)


async def close_change_hub(state: object) -> None:
    """End the app's change streams (at shutdown)."""
    hub = getattr(state, "change_hub", None)
    if hub is not None:
        await hub.close()


def stream_authorization(request: Request) -> str | None:
    """The ``Authorization`` header, or on ``/changes`` and ``/changefeeds`` only,
    ``?token=`` as a bearer token (a browser's ``EventSource`` and WebSocket cannot send
    headers; the changefeed's listing, its bootstrap's first request, takes it as its
    WebSocket does: it was 401, a tester)."""
    header = request.headers.get("authorization")
    # Every request passes here: its query is parsed only where a token may be.
    if header is not None or request.scope["path"] not in TOKEN_PATHS:
        return header
    token = request.query_params.get(TOKEN_PARAMETER)
    return f"Bearer {token}" if token else None


def _listed(query: Query, name: str) -> frozenset[str] | None:
    """The comma-separated values of filter ``name`` (``listed_values``: no empty element),
    each checked (``checked_value``)."""
    raw = query.params.get(name)
    if raw is None:
        return None
    texts, malformed = listed_values(raw)
    if malformed:
        query.invalid(name, malformed)
        return frozenset()
    values = []
    for text in texts:
        value, problem = checked_value(name, text)
        if problem:
            query.invalid(name, problem)
        values.append(value)
    return frozenset(values)


def parse_stream_request(request: Request) -> tuple[int | None, ChangeFilter]:
    """The position to start after (``Last-Event-ID`` over ``?after=``; none: from now) and
    the filters, scoped to an owner token's own VMs. Raises the ``ValidationFailed`` error."""
    query = STREAM.parse(request)
    after = query.integer("after", minimum=0)
    if "last-event-id" in request.headers:
        after = integer_param(
            {"Last-Event-ID": request.headers["last-event-id"].strip()}, "Last-Event-ID",
            minimum=0, maximum=MAX_INTEGER, refuse=query.invalid,
            message=lambda _: f"must be a log position (0 to {MAX_INTEGER})")
    principal = principal_of(request)
    shown = ChangeFilter(
        vm_uuids=_listed(query, "vm_uuid"),
        owner_uuid=query.owner_uuid,
        server_uuid=query.uuid_in_any_case("server_uuid"),
        types=_listed(query, "type"),
        states=_listed(query, "state"),
        scope_owner=principal.owner_uuid if principal.role == OWNER else None,
    )
    query.check()
    return after, shown


# GET /changes's parameters, in its schema and to its parsing (``parse_stream_request``)
STREAM = QueryParameters(
    Param("after", "start after this log position (default: now)", integer(0)),
    Param("Last-Event-ID", "start after this position (wins over after)", where="header"),
    Param("vm_uuid", "only these VMs (comma-separated)"),
    # uuids in any case, as vm_uuid's (docs/api.md, "Changes")
    Param("owner_uuid", "only VMs of this owner after the event (an owner's token is always "
          "scoped to its own)"),
    Param("server_uuid", "only changes on this server"),
    Param("type", "only these event types (comma-separated)"),
    Param("state", "only changes after which the resource is in these states "
          "(comma-separated)"),
    Param(TOKEN_PARAMETER, "the bearer token, for EventSource (which sends no headers)"),
    owner_in_any_case=True,
    extra={"responses": {"200": {
        "description": "an endless stream of changes (docs/api.md)",
        "content": {"text/event-stream": {"schema": {"type": "string"}}}}}})


@router.get("/changes", openapi_extra=STREAM, response_class=StreamingResponse)
async def changes(request: Request) -> StreamingResponse:
    """The changes after ``Last-Event-ID`` or ``?after=``, as ``text/event-stream``."""
    after, shown = parse_stream_request(request)
    hub = change_hub(request)
    admission = hub.admitted("sse")
    try:
        admission.__enter__()
    except TooManyStreamsError as error:
        raise UnavailableError(str(error)) from None
    try:
        # the hub's first read of the log, before the 200 is sent: a database down now is
        # a 503 with Retry-After, not a 200 whose stream breaks (contract tester)
        await hub.start()
    except BaseException:
        admission.__exit__(None, None, None)
        raise

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield sse.OPENING
            async for item in hub.stream(after, shown):
                yield sse.frame(item)
                if item is not None:
                    hub.sent("sse", item)
        finally:
            admission.__exit__(None, None, None)

    return StreamingResponse(frames(), media_type="text/event-stream", headers={
        "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
