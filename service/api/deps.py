"""What every route needs: the services, the caller's API behaviour and cause, read-your-writes,
and the shape of accepted-command responses."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from domain.vm import Cause, make_cause
from service.api.errors import UnavailableError, invalid_parameters
from service.api.fast_json import FastJSONResponse
from service.api.field_errors import field_errors
from service.api.fingerprints import fingerprints
from service.api.headers import stored_header, versioned_headers
from service.api.params import header_version
from service.api.query_parameters import check_declared_header
from service.commands.application import Accepted
from service.commands.change import ANY_VERSION, IfMatch
from service.commands.committer import CommitWaitTimeout
from service.commands.idempotency import IdempotencyKey
from service.commands.tasks import TaskWithdrawn
from service.commands.versioning import OLDEST, Behaviour
from service.container import Services
from service.db_limits import request_wait_bound
from service.logs import bind
from service.projector_presence import why_reads_wait

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def services_of(request: Request) -> Services:
    """The process's services (built in the app's lifespan)."""
    return request.app.state.services


def behaviour_of(request: Request) -> Behaviour:
    """The behaviour of the API version negotiated for this request."""
    return getattr(request.state, "behaviour", OLDEST)


def cause_of(request: Request) -> Cause:
    """The cause recorded on every event this request appends."""
    return make_cause(
        getattr(request.state, "actor", "anonymous"),
        request_id=request.state.request_id,
        idempotency_key=stored_header(request, "Idempotency-Key"),
        api_version=behaviour_of(request).version,
    )


def idempotency_of(request: Request, data: Any, cause: Cause, *, mapped: bool = False,
                   parsed: BaseModel | None = None, kept_null: tuple[str, ...] = (),
                   defaults: type[BaseModel] | None = None) -> IdempotencyKey | None:
    """The request's ``Idempotency-Key``, scoped to the caller, with a fingerprint of what the
    request means (method, path, query, body ``data``, API version: service/api/fingerprints.py),
    or None without the header. The key is the one ``cause`` (the request's ``cause_of``)
    records: the header is read once.

    ``mapped``: a VM command's (an action, DeleteVm, CreateVm), whose parameters given in the
    body count as the query's, each in one form wherever given
    (``action_params.asked_params``). ``parsed``: the body as the route validated it, which
    is hashed as validated, its fields given what leaving them out means left out, but for
    ``kept_null`` (an update's: its ``null`` clears); ``defaults``: the body's model, whose
    defaults the older fingerprint left out of the body as sent. Either way a parameter given what its absence
    means (``?sync=false``) is the request without it. The ``older`` fingerprints are those
    the service gave the same request before (keys live ``ttl_s``, 24 h): a retry of the same
    bytes is answered as stored,
    where it was 422 ``IdempotencyKeyReused`` (reviewer)."""
    check_declared_header(request, "Idempotency-Key")
    key = cause["idempotency_key"]
    if key is None:
        return None
    if not 1 <= len(key) <= 255:
        raise invalid_parameters(request, [{"field": "Idempotency-Key", "code": "Invalid",
                                            "message": "must be 1 to 255 characters"}])
    scope = getattr(request.state, "actor", "anonymous")
    meant, older = fingerprints(request, data, behaviour_of(request).version, mapped=mapped,
                                defaults=defaults, parsed=parsed, kept_null=kept_null)
    return IdempotencyKey(scope, key, meant, older)


def if_match_of(request: Request) -> IfMatch:
    """The version ``If-Match`` names (``"7"``, ``7`` or ``W/"7"``); ``ANY_VERSION`` for
    ``*``, which matches any current representation (RFC 9110, 13.1.1), so a resource that
    does not exist is still 404 with it (not None, which is no header: without one a
    vm-agent report records a VM the log never had); None without the header. Anything
    else, a version out of ``?version=``'s range too, is refused naming ``If-Match``
    (``params.header_version``)."""
    check_declared_header(request, "If-Match")
    header = request.headers.get("if-match")
    if header is None:
        return None
    if header.strip() == "*":
        return ANY_VERSION
    return header_version(request, "If-Match", header)


# How much longer than its bound a command whose append is already in a batch is waited
# for, as a share of the bound: long enough for a batch under load to commit (a few ms to
# tens), short enough that a request still answers within about 1.5 bounds when the database
# stops answering, where the batch cannot commit at all (tests/integration/test_outages.py).
IN_BATCH_SHARE = 0.5


async def command(request: Request, run: Callable[[], T]) -> T:
    """Run ``run`` (a call of ``Commands``: load, decide, save) to its end on the committer's
    thread and await its result or error, with no thread-pool hop (service/commands/tasks.py).

    The wait ends after the request's database bound, as the request's own database calls
    do; then the command is given up: one not yet started never runs, and one that has not
    handed over its append ends at its next step without it, a 503 (``CommitWaitTimeout``,
    "not appended"). One whose append is already in a batch is waited for half a bound more
    (``IN_BATCH_SHARE``): its 202 if the batch commits, else a 503 saying it may still be
    appended (a retry with its ``Idempotency-Key``, or a read, tells)."""
    future = services_of(request).commands.committer.run(run, contextvars.copy_context())
    bound = request_wait_bound()
    if not await answered_within(future, bound):
        assert bound is not None
        if future.give_up():
            raise CommitWaitTimeout(bound, withdrawn=True) from None
        if not await answered_within(future, bound * IN_BATCH_SHARE):
            raise CommitWaitTimeout(bound, withdrawn=False) from None
    try:
        return future.result()
    except TaskWithdrawn:
        raise CommitWaitTimeout(bound or 0.0, withdrawn=True) from None


async def answered_within(future: Future[Any], timeout_s: float | None) -> bool:
    """Whether ``future`` (set on another thread) is done within ``timeout_s`` seconds (None:
    no limit). The wait neither cancels nor changes ``future``. One loop future, one timer
    and one cross-thread wake-up: ``asyncio.wrap_future`` and ``asyncio.wait`` made several
    futures and callbacks a command (docs/performance.md, "The batch as one query, and the
    command's wait")."""
    if future.done():
        return True
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: Future[Any]) -> None:  # on the thread that set ``future``
        if not loop.is_closed():  # a server shut down meanwhile has nobody to tell
            loop.call_soon_threadsafe(_settle, waiter, True)

    future.add_done_callback(wake)
    timer = None if timeout_s is None else loop.call_later(timeout_s, _settle, waiter, False)
    try:
        return await waiter
    finally:
        if timer is not None:
            timer.cancel()


def _settle(waiter: asyncio.Future[bool], answered: bool) -> None:
    if not waiter.done():
        waiter.set_result(answered)


def read_your_writes(request: Request, services: Services, names: tuple[str, ...],
                     *, eventual: bool, deciding: bool = False) -> None:
    """Wait (bounded) until read models ``names`` reflect every command acknowledged before
    this request began (api.md, "Read-your-writes"). Raises ``UnavailableError`` on timeout;
    ``deciding``: a command waits to decide (CreateVm's and ``add_nics``' ``networks``,
    named by the read model), before it appends anything, and its ``503`` says so. No
    command waits after its append: it answers from the saved aggregate (api.md, "Commands
    and the projector")."""
    if eventual:
        return
    position = services.commands.head_position()
    if not services.projections.wait_for(position, names, services.settings.read_timeout_s):
        raise UnavailableError(
            f"read models did not reach position {position} within "
            f"{services.settings.read_timeout_s} s" + why_reads_wait(services)
            + ("; nothing was appended: retry the command" if deciding else "")
        )


def read_one(request: Request, read_model: str, get: Callable[[str], dict[str, Any] | None],
             uuid: str, not_found: Callable[[str], Exception], *, eventual: bool
             ) -> dict[str, Any]:
    """One resource, ``get(uuid.lower())``, read from ``read_model`` once it reflects every
    command acknowledged before this request (``read_your_writes``; none of that wait when
    ``eventual``). Raises ``not_found(uuid)`` when the read model has no such resource."""
    read_your_writes(request, services_of(request), (read_model,), eventual=eventual)
    found = get(uuid.lower())
    if found is None:
        raise not_found(uuid)
    return found


def parse_body(request: Request, model: type[M], data: Any, *, message: str | None = None
               ) -> M:
    """Validate ``data`` against ``model``; a refusal names each bad field, under
    ``message`` (VMAPI's top-level text for the route, e.g. ``Invalid VM parameters``)."""
    try:
        return model.model_validate(data if data is not None else {})
    except PydanticValidationError as error:
        raise invalid_parameters(request, field_errors(error.errors()),
                                 message=message) from None


def accepted(request: Request, result: Accepted, *, status_code: int = 202) -> JSONResponse:
    """The answer to an accepted command: ``{vm_uuid, job_uuid}`` (VMAPI), the VM version as
    ``ETag``, the log position, and ``workflow-api`` (where the VMAPI client polls jobs)."""
    bind(vm_uuid=result.vm_uuid, job_uuid=result.job_uuid)  # the request's closing log line
    return FastJSONResponse({"vm_uuid": result.vm_uuid, "job_uuid": result.job_uuid},
                            status_code=status_code, headers=accepted_headers(request, result))


def accepted_headers(request: Request, result: Accepted) -> dict[str, str]:
    """The headers of an accepted command's answer (``accepted``), also those of a ``sync``
    command's refusal once its job ended badly (``JobEndedBadlyError``): the command was
    accepted all the same."""
    return {**versioned_headers(result.version, result.position),
            "Location": f"/vms/{result.vm_uuid}", "workflow-api": _base_url(request)}


# Each base URL as text, by the scope items it is built from (``request.base_url`` parsed a
# URL object for every request: 2 % of the API's CPU under the P1 load). Bounded, though
# none of them is the client's to choose.
_BASE_URLS: dict[tuple[Any, ...], str] = {}
_BASE_URLS_KEPT = 256
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _base_url(request: Request) -> str:
    """Where this service answers, without a trailing ``/``: ``VMLEDGER_PUBLIC_URL`` when set,
    else the address the server accepted the request on (its scheme, host and port, and the
    app's root path). Never the request's ``Host`` header: a client's ``Host:
    evil.example`` was named back in ``workflow-api``, where the VMAPI client then polls
    (a tester)."""
    public = services_of(request).settings.public_url
    if public is not None:
        return public
    scope = request.scope
    scheme, server = scope.get("scheme", "http"), scope.get("server")
    key = (scheme, None if server is None else tuple(server),
           scope.get("app_root_path", scope.get("root_path", "")))
    text = _BASE_URLS.get(key)
    if text is None:
        if len(_BASE_URLS) >= _BASE_URLS_KEPT:
            _BASE_URLS.clear()
        text = _BASE_URLS[key] = _server_url(scheme, key[1], key[2])
    return text


def _server_url(scheme: str, server: tuple[Any, ...] | None, root_path: str) -> str:
    """``scheme://host[:port]root_path`` of the address a request was accepted on (an IPv6
    host in brackets, the scheme's default port left out); ``localhost`` for a server with
    no address (a Unix socket)."""
    if server is None:
        return f"{scheme}://localhost{root_path}".rstrip("/")
    host, port = str(server[0]), server[1]
    if ":" in host:
        host = f"[{host}]"
    shown = "" if port is None or port == _DEFAULT_PORTS.get(scheme) else f":{port}"
    return f"{scheme}://{host}{shown}{root_path}".rstrip("/")
