"""Every error the API answers, mapped to its HTTP status and VMAPI-shaped body in one place
(api.md, "Errors"): the API's own errors (``ApiError``), the table of every other one
(``ERRORS``), and the answer to each. A 5xx other than 503 is a bug. The app's handlers that
answer them are ``service.api.error_handlers``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError, PersistenceError
from fastapi import Request
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from starlette.requests import ClientDisconnect, HTTPConnection

from domain import rules
from domain.alias_hold import AliasHoldNotFoundError
from domain.errors import (
    IllegalTransitionError,
    InvalidTransitionError,
    JobNotFoundError,
    JobNotRunnableError,
    MovedEventError,
    ServerNotFoundError,
    ServerRemovedError,
    StaleGenerationError,
    StreamGapError,
    UnallocatedVmError,
    UnfoldableEventError,
    UnreadableEventError,
    UpdatePendingError,
    ValidationError,
    VersionMismatchError,
    VmAlreadyDestroyedError,
    VmBeingDestroyedError,
    VmNotFoundError,
    VolumeNotFoundError,
)
from domain.json_input import ECHOED, cut
from domain.server import InsufficientCapacityError
from domain.states import VmState
from service.access_errors import explain_refusal, refusal
from service.api.api_errors import (  # noqa: F401 - their one place to import from
    ApiError,
    BadDigestError,
    CrossSiteRequestError,
    ForbiddenError,
    JobEndedBadlyError,
    MalformedRequestError,
    PayloadTooLargeError,
    UnauthorizedError,
    UnavailableError,
    UnsupportedEncodingError,
)
from service.commands.application import ConflictRetriesExhaustedError
from service.commands.committer import CommitWaitTimeout
from service.commands.idempotency import IdempotencyKeyReusedError
from service.commands.version_ranges import InvalidVersionError
from service.database_failures import database_cause
from service.logs import Throttled
from service.schema_errors import explain, missing_schema

log = logging.getLogger(f"vmledger.{__name__}")

RETRY_AFTER_S = "1"


def schema_missing_logger() -> Throttled:
    """What logs a request met a database lacking what the service built: one line per
    30 s, not one per request."""
    return Throttled(log, "unavailable", interval_s=30.0, level=logging.WARNING)


_schema_missing_logged = schema_missing_logger()


def refusal_logger() -> Throttled:
    """What logs a request the database refused the service's role (``access_errors``): one
    line per 30 s, without a traceback, not one per request."""
    return Throttled(log, "unavailable", interval_s=30.0, level=logging.ERROR)


_refusal_logged = refusal_logger()


def validation_status(request: HTTPConnection) -> int:
    """Version 1 answers bad input with 409 as VMAPI does; version 2 with 422."""
    behaviour = getattr(request.state, "behaviour", None)
    return 422 if behaviour is not None and behaviour.major >= 2 else 409


#: The top-level message of a refusal of bad parameters: VMAPI's, word for word, on every
#: route where it has no other (sdc-vmapi lib/interceptors.js' loadVm, lib/endpoints/vms.js,
#: ListVms' validateParams); CreateVm's, UpdateVm's and the NIC actions' bodies have their
#: own (``service/api/routes_vm_commands.py``).
INVALID_PARAMETERS = "Invalid Parameters"


def invalid_parameters(request: HTTPConnection, errors: list[dict[str, str]],
                       code: str = "ValidationFailed", message: str | None = None) -> ApiError:
    """The error for bad query parameters or body fields, naming each field."""
    return ApiError(
        validation_status(request), code, message or INVALID_PARAMETERS, errors=errors
    )


# The longest message and field an error body carries: whatever a refusal repeats of a
# client's input (a parameter's name or value, a header) is bounded here, in every answer,
# where its own words do not cut it first (json_input.cut, ``ECHOED``).
MAX_MESSAGE = 1000
MAX_FIELD = 200
# The most ``errors`` entries a body lists; the rest are counted in ``errors_omitted``
MAX_ERRORS = 100


def body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The error body: ``{"code", "message", ...}``, its ``message`` and each of its
    ``errors``' ``field`` and ``message`` at most ``MAX_MESSAGE`` and ``MAX_FIELD``
    characters (cut, marked "…"), and at most ``MAX_ERRORS`` entries, the number left out
    then given as ``errors_omitted``."""
    errors = extra.get("errors")
    if errors:
        extra["errors"] = [_bounded(error) for error in errors[:MAX_ERRORS]]
        if len(errors) > MAX_ERRORS:
            extra["errors_omitted"] = len(errors) - MAX_ERRORS
    return {"code": code, "message": cut(message, MAX_MESSAGE), **extra}


def _bounded(error: Any) -> Any:
    if not isinstance(error, dict):
        return error
    bounded = dict(error)
    for key, limit in (("field", MAX_FIELD), ("message", MAX_MESSAGE)):
        if isinstance(bounded.get(key), str):
            bounded[key] = cut(bounded[key], limit)
    return bounded


@dataclass(frozen=True)
class Row:
    """How the API answers one kind of error: its status (``VALIDATION``: 409 in version 1,
    422 in version 2), its ``code``, the message (the error's own, unless ``message`` says
    otherwise), and the extra body fields and headers the error's facts give."""

    status: int
    code: str
    extra: Callable[[Any], dict[str, Any]] = lambda _error: {}
    message: Callable[[Any], str] = str
    headers: Callable[[Any], dict[str, str]] = lambda _error: {}


VALIDATION = 0  # the status of bad input depends on the API version (validation_status)


def _invalid_version(error: InvalidVersionError) -> str:
    """The error's message with the range asked for cut (``json_input.cut``): a header of
    any length was repeated whole, before the versions supported."""
    message = str(error)
    if len(error.requested) <= ECHOED:
        return message
    return message.replace(error.requested, cut(error.requested), 1)


def _unavailable(error: BaseException) -> str:
    """The message of a 503 for a database that could not be reached or was lost."""
    return f"the database is unavailable: {database_cause(error)}"


def _update_pending(error: UpdatePendingError) -> str:
    """Why an update's ``If-Match`` failed although it named the current version, and what
    to do (docs/api.md, "Contract: concurrency and idempotency")."""
    job = error.pending_job_uuid
    return (f"the VM's update job {job} is {error.execution}: the alias, metadata and tags "
            f"you read do not show its changes yet; wait for it (GET /jobs/{job}/wait) and "
            "read the VM again")


def _state_refusal(error: Any) -> dict[str, Any]:
    """A refusal because of state: the ``state`` and the ``allowed_actions`` (api.md)."""
    allowed = getattr(error, "allowed_actions", None)
    if allowed is None:  # a lifecycle fact the state does not allow: what actions it does,
        # on a server or not as the raiser said (IllegalTransitionError.has_server)
        allowed = rules.allowed_actions(VmState(error.state), has_server=error.has_server)
    return {"state": error.state, "allowed_actions": allowed}


# Every error the API answers with something other than a 500: found along the error class's
# MRO (a subclass without a row answers as its closest ancestor that has one). DomainError
# itself has no row: a refusal with none is a bug (500, logged), and tests/api/test_errors.py
# walks every DomainError subclass to prove there is none.
ERRORS: dict[type[Exception], Row] = {
    InvalidVersionError: Row(400, "InvalidVersion", lambda e: {"supported": e.supported},
                             message=lambda e: _invalid_version(e)),
    # VMAPI's words: its loadVm's (lib/interceptors.js), and for a job its Workflow API's,
    # whose refusal GetJob answers (node-workflow-moray-backend's getJob)
    VmNotFoundError: Row(404, "ResourceNotFound",
                         message=lambda e: f"VM not found{e.qualifier}"),
    JobNotFoundError: Row(404, "ResourceNotFound",
                          message=lambda e: f"Job with uuid '{cut(e.job_uuid)}' does not exist"),
    ServerNotFoundError: Row(404, "ResourceNotFound"),
    ServerRemovedError: Row(409, "InvalidTransition", _state_refusal),
    VolumeNotFoundError: Row(404, "ResourceNotFound"),
    # looked up by the change loop only, which makes the hold when there is none
    AliasHoldNotFoundError: Row(404, "ResourceNotFound"),
    InvalidTransitionError: Row(409, "InvalidTransition", _state_refusal),
    IllegalTransitionError: Row(409, "InvalidTransition", _state_refusal),
    UnallocatedVmError: Row(409, "UnallocatedVM", _state_refusal),
    VmAlreadyDestroyedError: Row(409, "VmAlreadyDestroyed", _state_refusal),
    VmBeingDestroyedError: Row(409, "VmBeingDestroyed", lambda e: {
        **_state_refusal(e), "destroy_job_uuid": e.destroy_job_uuid}),
    StaleGenerationError: Row(409, "StaleGeneration", lambda e: {
        "generation": e.generation, "last_applied": e.last_applied}),
    JobNotRunnableError: Row(409, "JobNotRunnable"),
    InsufficientCapacityError: Row(409, "InsufficientCapacity"),
    VersionMismatchError: Row(412, "PreconditionFailed",
                              lambda e: {"current_version": e.current},
                              headers=lambda e: {"ETag": f'"{e.current}"'}),
    # the version matched, but what was read of it does not show a pending update's changes
    UpdatePendingError: Row(412, "PreconditionFailed",
                            lambda e: {"current_version": e.current,
                                       "pending_job_uuid": e.pending_job_uuid},
                            message=lambda e: _update_pending(e),
                            headers=lambda e: {"ETag": f'"{e.current}"'}),
    ValidationError: Row(VALIDATION, "ValidationFailed", lambda e: {"errors": e.errors},
                         message=lambda e: e.summary),
    IdempotencyKeyReusedError: Row(422, "IdempotencyKeyReused"),
    # the connection closed before the body's end (the client went away, or the server's
    # parser refused the rest and answered 400 itself): the client's doing, not a 500
    ClientDisconnect: Row(400, "BadRequest", message=lambda _e: "the connection closed "
                          "before the request's body was read whole"),
    ConflictRetriesExhaustedError: Row(
        503, "Unavailable", message=lambda e: f"too many concurrent writers, try again: {e}"),
    # an OperationalError whose message says more: the database may be fine, and whether the
    # command was appended is in it
    CommitWaitTimeout: Row(503, "Unavailable", message=str),
    # the cause in the driver's words, one line, no credentials (a refusal, a bad password,
    # too many connections and a network fault each say which)
    OperationalError: Row(503, "Unavailable", message=_unavailable),
    InterfaceError: Row(503, "Unavailable", message=_unavailable),
    PoolTimeout: Row(503, "Unavailable", message=_unavailable),
    # the same, met by a read made with the driver itself (a read model's query, a bounded
    # wait's own error: service/db_limits.py), not wrapped by the event store: it was a 500.
    # psycopg's operational errors are the server's or the connection's (a cut, a shutdown,
    # a timeout), never our SQL's (a ProgrammingError, still a 500)
    psycopg.OperationalError: Row(503, "Unavailable", message=_unavailable),
    psycopg.InterfaceError: Row(503, "Unavailable", message=_unavailable),
    # an event deleted behind the service's back: nothing can be answered past it until an
    # operator repairs the log (not a 500: the service is sound, the stored log is not)
    StreamGapError: Row(503, "Unavailable", message=lambda e: f"{e}; the log needs repair "
                        "(vmledger audit verify names what is missing)"),
    # an event edited behind the service's back (its topic or state): the same damage
    UnreadableEventError: Row(503, "Unavailable", message=lambda e: f"{e}; the log needs "
                              "repair (vmledger audit verify names the event)"),
    # one moved outside the log's positions: the same damage
    MovedEventError: Row(503, "Unavailable", message=lambda e: f"{e}; the log needs repair "
                         "(vmledger audit verify names the event)"),
    # one edited into an event its fold cannot apply (domain.folding): the same damage, not
    # the client's refusal (a 409 describing the state the damage left) nor a bug (500)
    UnfoldableEventError: Row(503, "Unavailable", message=lambda e: f"{e}; the log needs "
                              "repair (vmledger audit verify names the event)"),
}


# Errors of the database drivers with no row: answered 503 when they say a table the
# service built is missing (service/schema_errors.py) or that the database refused the
# service's role (service/access_errors.py), else left a 500 (a bug).
DRIVER_ERRORS: tuple[type[Exception], ...] = (PersistenceError, psycopg.Error, sqlite3.Error)


def row_for(error_class: type[BaseException]) -> Row | None:
    """The row of ``error_class``, or of its closest ancestor that has one; None if none."""
    return next((ERRORS[c] for c in error_class.__mro__ if c in ERRORS), None)


def error_response(request: Request, error: Exception) -> JSONResponse:
    """The answer to ``error`` by its row in ``ERRORS`` (a 500, logged, when it has none);
    503, whatever its class, for an error saying a table the service built is missing
    (``schema_errors``) or that the database refused the service's role what it asked
    (``access_errors``: a privilege it lacks, a database that takes no writes), its message
    naming what and the role."""
    unavailable = setup_problem_error(request, error)
    if unavailable is not None:
        return api_error_response(unavailable)
    row = row_for(type(error))
    if row is None:
        log.error("unmapped error %r", error)
        return JSONResponse(body("InternalError", "unmapped refusal"), status_code=500)
    status = validation_status(request) if row.status == VALIDATION else row.status
    headers = row.headers(error)
    if status == 503:
        log.warning("unavailable: %s", error)
        headers = {**headers, "Retry-After": RETRY_AFTER_S}
    return JSONResponse(body(row.code, row.message(error), **row.extra(error)),
                        status_code=status, headers=headers or None)


def setup_problem_error(request: Request, error: BaseException) -> UnavailableError | None:
    """The 503 of an error saying the database is not set up as the service needs
    (``database_setup_problem``), logged at most once per interval; None for any other."""
    said = database_setup_problem(request, error)
    if said is None:
        return None
    message, logged = said
    logged(message)
    return UnavailableError(message)


def database_setup_problem(request: Request, error: BaseException
                           ) -> tuple[str, Callable[[str], None]] | None:
    """The message for ``error`` if it says the database is not set up as the service needs
    (a table missing, a refusal of its role), and what logs it; None for any other error."""
    missing = missing_schema(error)
    if missing is not None:
        return explain(missing), _schema_missing_logged
    refused = refusal(error)
    if refused is not None:
        return explain_refusal(refused, _role(request)), _refusal_logged
    return None


def _role(request: Request) -> str | None:
    """The PostgreSQL role the process connects as (None without services, or on SQLite)."""
    services = getattr(request.app.state, "services", None)
    if services is None or services.settings.backend != "postgres":
        return None
    return services.settings.postgres_target().user


def api_error_response(error: ApiError) -> JSONResponse:
    """The response to an ``ApiError`` (also used by middleware, outside the handlers)."""
    headers = dict(error.headers or {})
    if error.status == 503:
        headers["Retry-After"] = RETRY_AFTER_S
    return JSONResponse(body(error.code, error.message, **error.extra),
                        status_code=error.status, headers=headers or None)


def get_or_head_only() -> JSONResponse:
    """The 405 ``BadMethod`` answer, ``Allow: GET, HEAD``, of a path served in front of the
    app's routes (the console's pages, the API docs), which answers only those methods."""
    return JSONResponse(body("BadMethod", "Method Not Allowed"), status_code=405,
                        headers={"Allow": "GET, HEAD"})
