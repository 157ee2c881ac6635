"""Request bodies as every route reads them (api.md, "Versions": a body that is not JSON is
``ValidationFailed`` naming ``body``): its JSON parsed strictly (``read_json_body``: UTF-8,
no key twice), and a route with no body of its own refusing one it would not read, rather
than ignore it. ``AuthorizedRoute`` (service/api/auth.py) calls one of them before each
route's handler."""

from __future__ import annotations

import base64
import hashlib

from starlette.requests import Request

from domain import json_input
from domain.json_input import printable
from service.api.errors import (
    ApiError, BadDigestError, UnsupportedEncodingError, invalid_parameters,
)
from service.api.vmapi_rules import UNKNOWN_PARAMETER

#: The methods whose body a route may read; a GET's or HEAD's has no meaning (RFC 9110).
_BODY_METHODS = frozenset(("POST", "PUT", "DELETE", "PATCH"))
#: How much of a Content-Type value a refusal repeats.
_TYPE_SHOWN = 100


def is_json_type(content_type: str | None) -> bool:
    """Whether a body of ``content_type`` is read as JSON: none, an empty one, or
    ``application/json`` and ``application/…+json`` (any case, any parameters), as FastAPI
    reads it with ``strict_content_type=False`` (service/api/app.py)."""
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


def not_json_type(request: Request) -> ApiError:
    """The refusal of a body sent as another type than JSON's (``text/plain``, a form's,
    ``curl -d``'s default): it is not read, and the client is told why."""
    # the media type alone, and not all of a header a client may have made long
    sent = request.headers.get("content-type", "").split(";")[0].strip()[:_TYPE_SHOWN]
    return _body_refusal(request, "the body must be JSON sent with Content-Type: "
                                  f"application/json (it was sent as {printable(sent)})")


async def read_json_body(request: Request) -> None:
    """Parse the request's body as FastAPI would hand it to the route (a JSON type, or none),
    by ``json_input.loads_body``, and leave the value where FastAPI's parse looks first
    (``Request.json`` keeps its value in ``_json``), so the route gets it unchanged. Raises
    the ``ValidationFailed`` error naming ``body`` for bytes that are not UTF-8 or not JSON,
    or naming a key an object gives twice. A body of another type is left to FastAPI, which
    hands the route its bytes (refused by error_handlers as ``not_json_type``)."""
    raw = await received(request)
    if not raw or not is_json_type(request.headers.get("content-type")):
        return
    request._json = _parsed(request, raw)  # noqa: SLF001 (Starlette's cache of .json())


async def received(request: Request) -> bytes:
    """The request's body, read once (Starlette keeps it), as its headers say it was sent:
    a ``Content-Encoding`` other than ``identity`` is refused (``UnsupportedEncodingError``,
    415: nothing is decoded, and a gzip body read as JSON was "not UTF-8 text"), and so is a
    body whose MD5 is not its ``Content-MD5`` (``BadDigestError``, 400), as VMAPI's restify
    body reader checks it. An empty body has nothing to check (restify reads none)."""
    raw = await request.body()
    if not raw:
        return raw
    encoding = request.headers.get("content-encoding")
    if encoding is not None and any(
            token.strip().lower() not in ("", "identity") for token in encoding.split(",")):
        raise UnsupportedEncodingError(printable(encoding))
    sent = request.headers.get("content-md5")
    if sent is not None:
        computed = base64.b64encode(hashlib.md5(raw, usedforsecurity=False).digest()).decode()
        if sent.strip() != computed:
            raise BadDigestError(printable(sent), computed)
    return raw


def _parsed(request: Request, raw: bytes) -> object:
    """``raw`` as JSON, or the refusal naming ``body`` or the repeated key."""
    try:
        return json_input.loads_body(raw)
    except json_input.RepeatedKeyError as error:
        raise invalid_parameters(request, [{"field": error.path, "code": "Invalid",
                                            "message": "may be given only once"}]) from None
    except json_input.JsonInputError as error:
        raise _body_refusal(request, f"not valid JSON ({error})") from None


async def refuse_unread_body(request: Request) -> None:
    """Refuse the body of a request to a route that reads none (``DELETE /sim/faults``, ``POST
    /sim/workers``, the console's audit run): such a route takes its parameters in the query.
    None, an empty one, ``{}`` and ``null`` (what some HTTP libraries send with every POST)
    are taken; a body that is not JSON, or malformed, is refused as every route's is, and an
    object's fields are each refused as unknown (``Invalid parameter``), as a route with a
    body refuses one it does not know. Each was answered 200 and acted on, the body unread
    (a tester's ``-d '{not json'``)."""
    if request.method not in _BODY_METHODS:
        return
    raw = await received(request)
    if not raw.strip():
        return
    if not is_json_type(request.headers.get("content-type")):
        raise not_json_type(request)
    value = _parsed(request, raw)
    if value is None or value == {}:
        return
    if isinstance(value, dict):
        raise invalid_parameters(request, [
            {"field": printable(str(key)), "code": "Invalid", "message": UNKNOWN_PARAMETER}
            for key in value])
    raise _body_refusal(request, "this route takes no body (its parameters are in the query)")


def _body_refusal(request: Request, message: str) -> ApiError:
    return invalid_parameters(request, [{"field": "body", "code": "Invalid",
                                         "message": message}])
