"""Headers as the API defines them: the text of a stored request header (``x-context``,
``Idempotency-Key``) as UTF-8, the bounds on stored headers, the request's id
(``x-request-id``, or one made for it), and the ``ETag`` and ``x-log-position`` of an answer
about a versioned object or a command."""

from __future__ import annotations

import random
from collections.abc import Iterable

from fastapi import Request
from starlette.types import Message, Scope, Send

from service.api.errors import invalid_parameters


def stored_header(request: Request, name: str) -> str | None:
    """The text of header ``name`` (as the API names it: ``x-context``, ``Idempotency-Key``)
    read as UTF-8, or None without it: Starlette reads a header's bytes as Latin-1, which
    stored an ``é`` sent in UTF-8 as ``Ã©``. Bytes that are not UTF-8 raise the
    ``ValidationFailed`` error naming the header. For the headers whose text is stored."""
    value = request.headers.get(name)
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_parameters(request, [{"field": name, "code": "Invalid",
                                            "message": "must be UTF-8 text"}]) from None


# A version-4 UUID's fixed bits: the version (4) and the variant (RFC 9562's, 10xx).
_UUID4_CLEARED = ~(0xF000 << 64 | 0xC000 << 48)
_UUID4_SET = 0x4000 << 64 | 0x8000 << 48


def new_request_id() -> str:
    """A request id for requests that bring none: the text of a random version-4 UUID, as
    ``str(uuid.uuid4())`` gives, its bits from ``random`` (seeded by the system, again in
    each forked child) rather than ``os.urandom``: an id must be unique, not secret, and
    making the ``UUID`` object was 1.8 % of a command's CPU (docs/performance.md)."""
    bits = random.getrandbits(128) & _UUID4_CLEARED | _UUID4_SET
    text = f"{bits:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def with_request_id(scope: Scope, send: Send) -> Send:
    """``send`` for an answer given in front of the envelope (service/api/envelope.py), which
    gives every answer behind it ``x-request-id``: the API docs and schema, the console's
    shells, assets and 404 page, and their 405s (served before the token check, so outside
    it). The answer's head gains the request's id (``request_id_in``), replacing any it
    had, as every answer carries one (docs/api.md, "Contract: conventions"; a tester found
    ``/openapi.json``, ``/docs`` and the console's pages without it)."""
    request_id = request_id_in(scope["headers"]).encode()

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                *((name, value) for name, value in message.get("headers", ())
                  if name.lower() != b"x-request-id"), (b"x-request-id", request_id)]
        await send(message)

    return sending


# Headers whose value is stored (in every event a request appends, or a job's params): each
# is bounded, so no client can make the log carry kilobytes per event (docs/api.md,
# "Headers").
MAX_REQUEST_ID = 128
MAX_X_CONTEXT_BYTES = 4096


def request_id_of(request: Request) -> str:
    """The request's id: its ``x-request-id`` when that is 1 to ``MAX_REQUEST_ID`` printable
    ASCII characters, else a generated one, as for one given twice (a tracing header should
    not fail the request; the id used is answered in ``x-request-id`` either way)."""
    return request_id_in(request.scope["headers"])


def request_id_in(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """``request_id_of`` a request whose raw headers (an ASGI scope's) are ``headers``."""
    given = None
    for name, value in headers:
        if name == b"x-request-id":
            if given is not None:  # two: which names the request would be a guess
                return new_request_id()
            given = value.decode("latin-1")
    if given and len(given) <= MAX_REQUEST_ID and given.isascii() and given.isprintable():
        return given
    return new_request_id()



def versioned_headers(version: int | None, position: int | None = None) -> dict[str, str]:
    """The headers of an answer about a versioned object or from a command (docs/api.md,
    "Contract: concurrency and idempotency" and "Commands"): ``ETag``, the object's version
    (a VM command's: the VM's; None: the answer is no one object, as ``PUT /vms``'), and
    ``x-log-position``, the log position of the command's last event (None: it appended
    nothing: a read, a repeat answered from its ``Idempotency-Key``, a report that changed
    nothing). Every route that appends or answers a versioned object builds them here: a
    tester found ``POST /servers``, the server actions and the agents' reports without the
    position, and the networks without ``ETag``."""
    headers = {} if version is None else {"ETag": f'"{version}"'}
    if position is not None:
        headers["x-log-position"] = str(position)
    return headers
