"""Analytics routes (``/stats/*``): counts, transitions, durations, failures and stuck VMs,
read from the ``analytics`` read model (docs/analytics.md). Every route takes ``owner_uuid``
to count only that owner's VMs."""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.responses import JSONResponse

from domain.states import VmState
from projections.analytics_queries import AnalyticsQueries
from service.api.auth import authorized_router
from service.api.deps import read_your_writes, services_of
from service.api.params import MAX_LIMIT, Query
from service.api.query_parameters import (
    LIMIT,
    OFFSET,
    Param,
    QueryParameters,
    integer,
    one_of,
    owner,
)

router = authorized_router()

READ_MODELS = ("analytics",)
_STATES = tuple(state.value for state in VmState)
_BREAKDOWNS = {"owner": "owner_uuid", "server": "server_uuid"}
_FAILURE_KEYS = {"reason": "reason", "server": "server_uuid"}
_OWNER = owner("count only this owner's VMs")
STATES = QueryParameters(
    Param("by", "break the counts down by owner or by server", one_of(_BREAKDOWNS)), _OWNER)
TRANSITIONS = QueryParameters(_OWNER)
DURATIONS = QueryParameters(
    Param("from", "the state the time is measured from", one_of(_STATES), required=True),
    Param("to", "the state the time is measured to (not from's)", one_of(_STATES),
          required=True),
    _OWNER)
FAILURES = QueryParameters(
    Param("by", "count by reason (the default) or by the server they failed on",
          one_of(_FAILURE_KEYS)), _OWNER)
STUCK = QueryParameters(
    Param("older_than", "only VMs in a transient state for this many seconds or more "
          "(default: the service's stuck threshold)", integer(0, 10**9)),
    LIMIT, OFFSET, _OWNER)


def _choice(query: Query, name: str, choices: dict[str, str] | tuple[str, ...], *,
            required: bool = False) -> str | None:
    """The value of ``name`` if it is one of ``choices``; otherwise refused naming it."""
    value = query.params.get(name)
    if value is None:
        if required:
            query.invalid(name, "Missing parameter", code="Missing")
        return None
    if value not in choices:
        query.invalid(name, f"must be one of {', '.join(choices)}")
        return None
    return value


def _analytics(request: Request, query: Query) -> AnalyticsQueries:
    """Validate the query, wait for the analytics read model (read-your-writes), and return
    its queries."""
    query.check()
    services = services_of(request)
    read_your_writes(request, services, READ_MODELS, eventual=query.eventual)
    return AnalyticsQueries(services.db)


@router.get("/stats/states", openapi_extra=STATES)
def stats_states(request: Request) -> JSONResponse:
    """How many VMs are in each state now; ``by=owner|server`` breaks the counts down."""
    query = STATES.parse(request)
    by = _choice(query, "by", _BREAKDOWNS)
    analytics = _analytics(request, query)
    if by is None:
        return JSONResponse(analytics.states(query.owner_uuid))
    return JSONResponse(analytics.states_by(_BREAKDOWNS[by], query.owner_uuid))


@router.get("/stats/transitions", openapi_extra=TRANSITIONS)
def stats_transitions(request: Request) -> JSONResponse:
    """How many times VMs went from one state to another, per (from, to) pair."""
    query = TRANSITIONS.parse(request)
    return JSONResponse(_analytics(request, query).transitions(query.owner_uuid))


@router.get("/stats/durations", openapi_extra=DURATIONS)
def stats_durations(request: Request) -> JSONResponse:
    """Count, p50, p90, p99 and max (ms) of the time from entering ``from`` to entering
    ``to`` (e.g. provisioning to running)."""
    query = DURATIONS.parse(request)
    from_state = _choice(query, "from", _STATES, required=True)
    to_state = _choice(query, "to", _STATES, required=True)
    if from_state is not None and from_state == to_state:
        query.invalid("to", "must differ from from")
    analytics = _analytics(request, query)
    assert from_state is not None and to_state is not None
    return JSONResponse(
        analytics.durations(from_state, to_state, query.owner_uuid).as_dict())


@router.get("/stats/failures", openapi_extra=FAILURES)
def stats_failures(request: Request) -> JSONResponse:
    """How many times VMs failed, by ``reason`` (default: evicted, crashed,
    provision_failed, ...) or by the ``server`` they failed on."""
    query = FAILURES.parse(request)
    by = _choice(query, "by", _FAILURE_KEYS) or "reason"
    return JSONResponse(_analytics(request, query).failures(_FAILURE_KEYS[by],
                                                            query.owner_uuid))


@router.get("/stats/stuck", openapi_extra=STUCK)
def stats_stuck(request: Request) -> JSONResponse:
    """VMs in a transient state (provisioning) for ``older_than`` seconds or more (default:
    the service's stuck threshold, ``VMLEDGER_STUCK_TRANSIENT_S``), longest first, paged by
    ``limit`` (default and max 1000) and ``offset`` as the other lists (ListVms, ListJobs,
    ListVolumes: the total counts more than a page holds); the total in
    x-joyent-resource-count."""
    query = STUCK.parse(request)
    older_than = query.integer("older_than", minimum=0, maximum=10**9)  # 31 years, in s
    limit = query.integer("limit", minimum=1, maximum=MAX_LIMIT) or MAX_LIMIT
    offset = query.integer("offset", minimum=0) or 0
    analytics = _analytics(request, query)
    older_than_ms = (round(services_of(request).settings.stuck_transient_s * 1000)
                     if older_than is None else older_than * 1000)
    stuck, total = analytics.stuck(older_than_ms, int(time.time() * 1000),
                                   owner_uuid=query.owner_uuid, limit=limit,
                                   offset=offset)
    return JSONResponse(stuck, headers={"x-joyent-resource-count": str(total)})
