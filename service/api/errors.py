"""Every error the API answers, mapped to its HTTP status and VMAPI-shaped body in one place
(api.md, "Errors"). A 5xx other than 503 is a bug.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from domain.errors import (
    DomainError,
    DuplicateVmError,
    ServerNotFoundError,
    StaleGenerationError,
    InvalidTransitionError,
    JobNotFoundError,
    UnallocatedVmError,
    ValidationError,
    VersionMismatchError,
    VmAlreadyDestroyedError,
    VmNotFoundError,
    VolumeNotFoundError,
)
from service.commands.application import ConflictRetriesExhaustedError
from service.commands.idempotency import IdempotencyKeyReusedError
from service.commands.versioning import InvalidVersionError

log = logging.getLogger(f"vmledger.{__name__}")

RETRY_AFTER_S = "1"


class ApiError(Exception):
    """An error the API layer itself raises (not a domain refusal)."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.extra = extra


class UnauthorizedError(ApiError):
    """No bearer token, or one that matches no configured token (401)."""

    def __init__(self, message: str):
        super().__init__(401, "Unauthorized", message,
                         headers={"WWW-Authenticate": 'Bearer realm="vmledger"'})


class ForbiddenError(ApiError):
    """The caller's role is not allowed on the route, or an agent reports for another server
    (403)."""

    def __init__(self, message: str):
        super().__init__(403, "Forbidden", message)


class UnavailableError(ApiError):
    """The database is unreachable, or a read timed out waiting for projections."""

    def __init__(self, message: str):
        super().__init__(503, "Unavailable", message)


def validation_status(request: Request) -> int:
    """Version 1 answers bad input with 409 as VMAPI does; version 2 with 422."""
    behaviour = getattr(request.state, "behaviour", None)
    return 422 if behaviour is not None and behaviour.major >= 2 else 409


def invalid_parameters(request: Request, errors: list[dict[str, str]],
                       code: str = "ValidationFailed", message: str | None = None) -> ApiError:
    """The error for bad query parameters or body fields, naming each field."""
    return ApiError(
        validation_status(request), code, message or "Invalid parameters", errors=errors
    )


def field_errors(items: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """pydantic's (or FastAPI's) validation errors as VMAPI's ``errors`` list: one
    ``{field, code: Missing|Invalid, message}`` per problem. FastAPI prefixes a location with
    where the value came from (``body``, ``query``, ``path``): that first part is not the field."""
    errors = []
    for item in items:
        location = [str(part) for part in item.get("loc", ())]
        if location[:1] in (["body"], ["query"], ["path"]):
            location = location[1:]
        if item.get("type") == "json_invalid":  # its loc holds a character offset, no field
            errors.append({"field": "body", "code": "Invalid", "message": (
                f"not valid JSON ({item.get('ctx', {}).get('error', 'malformed')}, at "
                f"character {location[0] if location else '?'})")})
            continue
        errors.append({
            "field": ".".join(location) or "body",
            "code": "Missing" if item.get("type") == "missing" else "Invalid",
            "message": item.get("msg", "invalid"),
        })
    return errors


def body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The error body: ``{"code", "message", ...}``."""
    return {"code": code, "message": message, **extra}


def _domain_response(request: Request, error: DomainError) -> JSONResponse:
    if isinstance(error, StaleGenerationError):
        return JSONResponse(body("StaleGeneration", str(error), generation=error.generation,
                                 last_applied=error.last_applied), status_code=409)
    if isinstance(error, VmNotFoundError | JobNotFoundError | ServerNotFoundError
                  | VolumeNotFoundError):
        return JSONResponse(body("ResourceNotFound", str(error)), status_code=404)
    if isinstance(error, InvalidTransitionError):
        return JSONResponse(
            body("InvalidTransition", str(error), state=error.state,
                 allowed_actions=error.allowed_actions),
            status_code=409,
        )
    if isinstance(error, UnallocatedVmError):
        return JSONResponse(body("UnallocatedVM", str(error), state=error.state), status_code=409)
    if isinstance(error, VmAlreadyDestroyedError):
        return JSONResponse(body("VmAlreadyDestroyed", str(error), state="destroyed"),
                            status_code=409)
    if isinstance(error, VersionMismatchError):
        return JSONResponse(
            body("PreconditionFailed", str(error), current_version=error.current),
            status_code=412, headers={"ETag": f'"{error.current}"'},
        )
    if isinstance(error, DuplicateVmError):
        # A validation error like any other (VMAPI: ValidationFailed, errors[].code Duplicate)
        return JSONResponse(
            body("ValidationFailed", str(error), errors=[
                {"field": "uuid", "code": "Duplicate", "message": "already exists"}]),
            status_code=validation_status(request),
        )
    if isinstance(error, ValidationError):
        return JSONResponse(body("ValidationFailed", "Invalid parameters", errors=error.errors),
                            status_code=validation_status(request))
    log.error("unmapped domain error %r", error)
    return JSONResponse(body("InternalError", "unmapped refusal"), status_code=500)


def api_error_response(error: ApiError) -> JSONResponse:
    """The response to an ``ApiError`` (also used by middleware, outside the handlers)."""
    headers = dict(error.headers or {})
    if error.status == 503:
        headers["Retry-After"] = RETRY_AFTER_S
    return JSONResponse(body(error.code, error.message, **error.extra),
                        status_code=error.status, headers=headers or None)


def _unavailable(message: str) -> JSONResponse:
    return JSONResponse(body("Unavailable", message), status_code=503,
                        headers={"Retry-After": RETRY_AFTER_S})


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405: every method the app's schema lists for a path template
    the request's path matches (RFC 9110, 15.5.6)."""
    app = request.app
    templates = getattr(app.state, "allow_templates", None)
    if templates is None:
        templates = app.state.allow_templates = [
            (re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"),
             {method.upper() for method in operations})
            for path, operations in app.openapi()["paths"].items()]
    methods: set[str] = set()
    for pattern, listed in templates:
        if pattern.match(request.url.path):
            methods |= listed
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    """Register every error handler on ``app``."""

    @app.exception_handler(DomainError)
    async def domain_error(request: Request, error: DomainError) -> JSONResponse:
        return _domain_response(request, error)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return api_error_response(error)

    @app.exception_handler(InvalidVersionError)
    async def invalid_version(request: Request, error: InvalidVersionError) -> JSONResponse:
        return JSONResponse(body("InvalidVersion", str(error), supported=error.supported),
                            status_code=400)

    @app.exception_handler(RequestValidationError)
    async def request_validation(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse(body("ValidationFailed", "Invalid parameters",
                                 errors=field_errors(error.errors())),
                            status_code=validation_status(request))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 400 and error.detail == "There was an error parsing the body":
            # FastAPI's answer to a body its JSON parser gave up on for another reason than
            # bad syntax: nested deeper than the parser's recursion limit (about 1,000 levels)
            return JSONResponse(body("ValidationFailed", "Invalid parameters", errors=[
                {"field": "body", "code": "Invalid",
                 "message": "not valid JSON (nested too deeply)"}]),
                status_code=validation_status(request))
        code = {404: "ResourceNotFound", 405: "BadMethod", 413: "PayloadTooLarge"}.get(
            error.status_code, "Error")
        headers = dict(error.headers or {})
        if error.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return JSONResponse(body(code, str(error.detail)), status_code=error.status_code,
                            headers=headers or None)

    @app.exception_handler(IdempotencyKeyReusedError)
    async def key_reused(request: Request, error: IdempotencyKeyReusedError) -> JSONResponse:
        return JSONResponse(body("IdempotencyKeyReused", str(error)), status_code=422)

    @app.exception_handler(ConflictRetriesExhaustedError)
    async def conflicts(request: Request, error: ConflictRetriesExhaustedError) -> JSONResponse:
        return _unavailable(f"too many concurrent writers, try again: {error}")

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    @app.exception_handler(PoolTimeout)
    async def database_down(request: Request, error: Exception) -> JSONResponse:
        log.warning("database unavailable: %s", error)
        return _unavailable("the database is unavailable")
