"""Triton's changefeed at the path VMAPI serves it (``/changefeeds``), for existing Triton
listeners (service/changes/triton.py; docs/api.md, "Changes")."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Annotated

from fastapi import Depends, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from service.api.auth import (
    OWNER, authorize, authorized_router, close_reason, principal_of, websocket_refusal,
)
from service.api.errors import invalid_parameters, row_for
from projections.formats import MAX_INTEGER
from service.api.params import integer_param, integer_refusal
from service.api.query_parameters import Param, QueryParameters
from service.api.routes_changes import TOKEN_PARAMETER, change_hub
from service.changes import triton
from service.changes.filters import ChangeFilter
from service.changes.hub import ChangeHub, StreamEnd, TooManyStreamsError
from domain.json_input import printable

router = authorized_router()

# WebSocket close codes (RFC 6455, 7.4.1): refused registration, server overloaded.
POLICY_VIOLATION, TRY_AGAIN_LATER = 1008, 1013
# What the upgrade's URL may carry: where to resume, and the token (as on /changes). No
# ``consistency`` or ``owner_uuid``: a stream has no read to wait for, and is scoped by its
# token, so either would be taken and ignored.
UPGRADE_PARAMETERS = frozenset({"after", TOKEN_PARAMETER})
# The two GET routes take none of their own (``after`` is the upgrade's); the listing, a
# bootstrap's first request, takes the token as its upgrade does
NO_PARAMETERS = QueryParameters(scoped=False)
LISTING_PARAMETERS = QueryParameters(Param(
    TOKEN_PARAMETER, "the bearer token, for a client that sends no headers (as the upgrade)"),
    scoped=False)


@router.get("/changefeeds", openapi_extra=LISTING_PARAMETERS)
def changefeed_resources(request: Request) -> JSONResponse:
    """The resources this changefeed publishes, by name (Triton's ``GET /changefeeds``)."""
    LISTING_PARAMETERS.parse(request).check()
    return JSONResponse(triton.RESOURCES)


@router.get("/changefeeds/stats", openapi_extra=NO_PARAMETERS)
def changefeed_stats(request: Request) -> JSONResponse:
    """How many listeners are registered, and as what (Triton's ``/changefeeds/stats``)."""
    NO_PARAMETERS.parse(request).check()
    registrations = getattr(request.app.state, "changefeed_listeners", {})
    return JSONResponse(triton.stats(registrations))


def upgrade_after(websocket: WebSocket) -> int | None:
    """The position the upgrade's ``?after=`` gives (None: none given). Its URL may carry
    only ``UPGRADE_PARAMETERS``: any other one, or an ``after`` that is not a log position,
    refuses the upgrade before it is accepted, as every route refuses such a query (409
    ``ValidationFailed`` naming each; ``auth.websocket_refusal``). Runs after ``authorize``
    (a route's own dependencies come after its router's), which made the envelope's URL
    checks."""
    params = websocket.query_params
    refused = [{"field": printable(name), "code": "Invalid", "message": "Invalid parameter"}
               for name in params if name not in UPGRADE_PARAMETERS]
    after = integer_param(
        params, "after", minimum=0, maximum=MAX_INTEGER,
        refuse=lambda name, message: refused.append(
            {"field": name, "code": "Invalid", "message": message}),
        message=integer_refusal(0, MAX_INTEGER))
    if refused:
        raise websocket_refusal(websocket, invalid_parameters(websocket, refused))
    return after


@router.websocket("/changefeeds", dependencies=[Depends(authorize)])
async def changefeed(websocket: WebSocket,
                     after: Annotated[int | None, Depends(upgrade_after)]) -> None:
    """A Triton listener: registration, bootstrap, then its changes until it goes."""
    hub = change_hub(websocket)
    await websocket.accept()
    try:
        # From the upgrade, not the registration: a connection that never registers holds a
        # slot too, so such connections cannot go past the limit.
        with hub.admitted("changefeed"):
            message = await _registration(websocket, hub)
            if message is None:
                return
            try:
                registration = triton.parse_registration(message.get("text"), after)
            except triton.RegistrationError as error:
                await websocket.close(POLICY_VIOLATION, close_reason(str(error)))
                return
            principal = principal_of(websocket)
            shown = ChangeFilter(
                scope_owner=principal.owner_uuid if principal.role == OWNER else None)
            await _serve(websocket, hub, registration, shown)
    except TooManyStreamsError:
        await websocket.close(TRY_AGAIN_LATER, "too many change streams; try again later")


async def _registration(websocket: WebSocket, hub: ChangeHub) -> dict | None:
    """The listener's first message; ``None`` when it went away, or was closed for not
    sending it within ``VMLEDGER_CHANGES_REGISTRATION_TIMEOUT_S`` (1008) or because the
    service is shutting down (1013: it has no position yet, so none is named)."""
    timeout_s = websocket.app.state.services.settings.changes_registration_timeout_s
    # receive(), not receive_text(): a binary frame has no "text", and must be refused as a
    # bad registration, not end in a KeyError (close 1006).
    received = asyncio.ensure_future(websocket.receive())
    ended = asyncio.ensure_future(hub.ended())
    done, _ = await asyncio.wait((received, ended), timeout=timeout_s,
                                 return_when=asyncio.FIRST_COMPLETED)
    for task in (received, ended):
        if task not in done:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if received in done:
        message = received.result()
        return None if message["type"] == "websocket.disconnect" else message
    if ended in done:
        await websocket.close(TRY_AGAIN_LATER, "the service is shutting down")
    else:
        await websocket.close(POLICY_VIOLATION, f"no registration within {timeout_s:g} s")
    return None


async def _serve(websocket: WebSocket, hub: ChangeHub, registration: triton.Registration,
                 shown: ChangeFilter) -> None:
    try:
        await hub.start()
    except Exception as error:
        # a database down as the hub first reads the log: what a route answers 503 for is
        # "try again later" here, not an ASGI error's 1011 and traceback (contract tester)
        row = row_for(type(error))
        if row is None or row.status != 503:
            raise
        await websocket.close(TRY_AGAIN_LATER, close_reason(f"{row.message(error)}; try "
                                                            "again later"))
        return
    after = hub.position if registration.after is None else registration.after
    # One entry per connection (triton.stats): listeners may share an instance id.
    listeners = websocket.app.state.__dict__.setdefault("changefeed_listeners", {})
    connection = object()
    listeners[connection] = (registration.instance, {
        "resource": "vm", "subResources": sorted(registration.sub_resources)})
    await websocket.send_text(json.dumps(registration.bootstrap))
    drain = asyncio.create_task(_ignore_incoming(websocket))
    stream = hub.stream(after, shown)
    step: asyncio.Future | None = None
    try:
        while True:
            # Raced against the listener going away: the stream may send nothing for a
            # heartbeat (15 s), and the listener's registration and stream slot must not
            # outlive it that long.
            step = asyncio.ensure_future(anext(stream))
            await asyncio.wait((step, drain), return_when=asyncio.FIRST_COMPLETED)
            if drain.done():
                return  # the listener went away
            try:
                item = step.result()
            except StopAsyncIteration:
                return  # the hub ended the stream
            if isinstance(item, StreamEnd):
                await websocket.close(TRY_AGAIN_LATER, close_reason(
                    item.reason, f"; resume after {item.resume_after}"))
                return
            if item is None:
                continue
            message = triton.change_message(item, registration.sub_resources)
            if message is not None:
                await websocket.send_text(message)
                hub.sent("changefeed", item)
    except (WebSocketDisconnect, RuntimeError):
        return  # the socket closed under a send
    finally:
        for task in (step, drain):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await stream.aclose()
        listeners.pop(connection, None)


async def _ignore_incoming(websocket: WebSocket) -> None:
    """Read whatever the listener sends (its text heartbeats, or any frame, binary too) and
    ignore it, until it disconnects (docs/api.md, "Triton's changefeed")."""
    with contextlib.suppress(RuntimeError):  # the socket closed under us
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass
