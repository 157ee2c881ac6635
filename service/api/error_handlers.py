"""The app's error handlers: how the errors of ``service.api.errors`` (its table, ``ERRORS``,
and ``ApiError``) and FastAPI's and Starlette's own (a request's validation, an HTTP error:
404, 405 with its ``Allow``) reach the client, each answered with the error body of every
route (api.md, "Errors").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from domain.errors import DomainError
from domain.json_input import unparsable_reason
from service.api import head
from service.api.bodies import not_json_type
from service.api.errors import (
    DRIVER_ERRORS, ERRORS, INVALID_PARAMETERS, ApiError, api_error_response, body,
    database_setup_problem, error_response, row_for, validation_status,
)
from service.api.field_errors import field_errors


#: The methods a 405's ``Allow`` header can name: those of RFC 9110 (9.3) a route here might
#: have, and PATCH (RFC 5789).
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405: every method for which the app's router has a route
    matching the request's path (RFC 9110, 15.5.6), in alphabetical order, and HEAD where a
    GET route answers it (service/api/head.py)."""
    router, scope = request.app.router, request.scope
    return ", ".join(sorted(
        method for method in _METHODS
        if head.answers(router, scope, method)
        or (method == "HEAD" and head.head_as_get(router, scope))))


def install(app: FastAPI) -> None:
    """Register the error handlers on ``app``: one for every class in ``ERRORS`` (and
    DomainError, whose subclasses all have rows; Starlette's ``ClientDisconnect``, a body
    cut short, among them), one for ``ApiError``, and FastAPI's own request validation and
    HTTP errors."""

    async def mapped(request: Request, error: Exception) -> JSONResponse:
        if (row_for(type(error)) is None and not isinstance(error, DomainError)
                and database_setup_problem(request, error) is None):
            raise error  # a driver's error that is a bug (bad SQL): a 500, with its traceback
        return error_response(request, error)

    for error_class in (DomainError, *ERRORS, *DRIVER_ERRORS):
        app.add_exception_handler(error_class, mapped)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return api_error_response(error)

    @app.exception_handler(RequestValidationError)
    async def request_validation(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse(body("ValidationFailed", INVALID_PARAMETERS,
                                 errors=_unread_body(request, error.errors())
                                 or field_errors(error.errors())),
                            status_code=validation_status(request))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 400 and error.detail == "There was an error parsing the body":
            if isinstance(error.__cause__, ClientDisconnect):  # FastAPI's own read of it
                return error_response(request, error.__cause__)
            # FastAPI's answer to a body its JSON parser gave up on for another reason than
            # bad syntax; the parser's own error is the cause
            return JSONResponse(body("ValidationFailed", INVALID_PARAMETERS, errors=[
                {"field": "body", "code": "Invalid",
                 "message": f"not valid JSON ({unparsable_reason(error.__cause__)})"}]),
                status_code=validation_status(request))
        code = {404: "ResourceNotFound", 405: "BadMethod", 413: "PayloadTooLarge"}.get(
            error.status_code, "Error")
        headers = dict(error.headers or {})
        if error.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return JSONResponse(body(code, str(error.detail)), status_code=error.status_code,
                            headers=headers or None)


def _unread_body(request: Request, items: Sequence[Mapping[str, Any]]
                 ) -> list[dict[str, str]] | None:
    """The refusal of a body FastAPI did not read as JSON because its ``Content-Type`` is not
    JSON's (``text/plain``, a form's, ``curl -d``'s default), or None. The route got the raw
    bytes, and pydantic's "Input should be a valid dictionary" misled a client whose body
    was a JSON object. Still ``ValidationFailed``, not 415: VMAPI's restify leaves such a
    body unread too and refuses the request as missing its fields (409)."""
    if not any(tuple(item.get("loc", ())) == ("body",)
               and isinstance(item.get("input"), bytes | bytearray) for item in items):
        return None
    # worded once, for these routes and those that read no body (bodies.refuse_unread_body)
    return not_json_type(request).extra["errors"]
