"""Operations routes: ``/ping`` (database and projection lag) and ``/metrics``."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as ProbeTimeoutError

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from service import metrics as process_metrics
from service.access_errors import ReadRefused
from service.api.auth import authorized_router
from service.api.deps import services_of
from service.api.errors import UnavailableError, setup_problem_error
from service.api.query_parameters import QueryParameters
from service.database_failures import database_cause
from service.projector_presence import NO_RUNNER

router = authorized_router()

# Neither reads its query: a load balancer's or Prometheus' parameters are ignored
IGNORED = QueryParameters.ignored()

# Where /ping's probes run, so a probe stuck on an unanswering network is given up after
# ``ping_timeout_s`` (it ends by itself within the connection's network timeout).
_probes = ThreadPoolExecutor(max_workers=4, thread_name_prefix="vmledger-ping")


@router.get("/ping", openapi_extra=IGNORED)
def ping(request: Request) -> JSONResponse:
    """Health: the database answers, how far each read model lags the log (events), and which
    read models are past the log's head (they are not run until rebuilt); and VMAPI's
    ``healthy`` (bool), ``pid`` (this process's) and ``pingErrors`` (``{}`` when healthy).
    ``503`` with ``Retry-After`` when the probe fails (its message the cause in one line,
    ``database_cause``) or takes more than ``ping_timeout_s``
    (a load balancer gives up long before a partitioned connection would), when the role
    may not read a read model's table (PostgreSQL; ``ReadRefused``, said as a read of it
    is: every such read is 503), and when read models lag the log while no projection
    runner runs on the database (``service.projector_presence``): no read could be
    answered; that 503 has the lag a 200 has (``_lag``)."""
    services = services_of(request)

    def probe() -> tuple[int, dict[str, int], bool]:
        head = services.projections.head()
        positions, unreadable = services.projections.positions_and_unreadable()
        if unreadable:  # every read of it is 503: the ping says so rather than OK
            raise ReadRefused(unreadable)
        # behind with no runner to catch up: every read would time out (a tester found
        # /ping 200 there), so the ping says so rather than OK
        behind = any(position < head for position in positions.values())
        return head, positions, behind and not services.projector_running()

    try:
        head, positions, stalled = _probes.submit(probe).result(
            timeout=services.settings.ping_timeout_s)
    except ProbeTimeoutError as error:
        # a locked table or an overloaded server looks the same from here as a lost one
        raise _unhealthy(UnavailableError(
            f"database unreachable or busy: no answer in {services.settings.ping_timeout_s} s")
        ) from error
    except Exception as error:  # noqa: BLE001 - any failure to reach the database is a 503
        # reached, but not set up as it needs (a table missing, one the role may not read):
        # named as on every route; else the cause in the driver's words (a refusal, a bad
        # password, too many connections and a network fault each say which)
        raise _unhealthy(setup_problem_error(request, error) or UnavailableError(
            f"database unreachable: {database_cause(error)}")) from error
    lag = _lag(services.settings.backend, head, positions)
    if stalled:
        refused = _unhealthy(UnavailableError("read models behind the log (" + ", ".join(
            f"{name} by {head - position}" for name, position in sorted(positions.items())
            if position < head) + f") and {NO_RUNNER}"), part="projections")
        refused.extra.update(lag)  # the lag, as a 200 gives it (docs/operations.md)
        raise refused
    return JSONResponse({
        "status": "OK",
        # VMAPI's (sdc-vmapi lib/endpoints/ping.js), for health checks written for it
        "healthy": True,
        "pid": os.getpid(),
        "pingErrors": {},
        **lag,
    })


def _lag(backend: str, head: int, positions: dict[str, int]) -> dict[str, object]:
    """``/ping``'s ``backend``, ``head_position``, ``projection_lag`` (events, by read
    model) and ``projection_past_head``, in its 200 and in its 503 of read models behind."""
    return {
        "backend": backend,
        "head_position": head,
        "projection_lag": {name: head - position for name, position in positions.items()},
        # a negative lag: the runner does not run it (projections/past_head.py); named
        # here so that a health check need not know what a negative lag means
        "projection_past_head": sorted(name for name, position in positions.items()
                                       if position > head),
    }


def _unhealthy(error: UnavailableError, part: str = "database") -> UnavailableError:
    """``error`` (a 503) with VMAPI's health fields in its body: ``healthy`` false, this
    process's ``pid``, and ``pingErrors`` naming what failed (``part``, ``database`` or
    ``projections``: the message)."""
    error.extra.update(healthy=False, pid=os.getpid(), pingErrors={part: error.message})
    return error


@router.get("/metrics", openapi_extra=IGNORED)
def metrics(request: Request) -> Response:
    """Prometheus metrics: this process's, and the fleet's jobs from ``job_view``."""
    fleet = request.app.state.metrics_registry
    return Response(process_metrics.exposition(fleet), media_type=CONTENT_TYPE_LATEST)
