"""The console's fleet-wide fragments: who is signed in, the fleet (counts now and over time,
jobs, queues, stuck and quarantined VMs, projection lag, one page of VMs) and the servers.

Each is an API route (roles in ``service/api/auth.py:ROUTE_ROLES``), scoped like the API: an
owner token sees its own VMs only, whatever ``owner_uuid`` it asks for."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse

from domain.states import VmState
from projections.analytics_queries import AnalyticsQueries
from projections.console_queries import ConsoleQueries
from projections.vm_markers import InvalidMarkerError
from service.api.auth import OWNER, authorized_router, principal_of, roles_for
from service.api.deps import read_your_writes, services_of
from service.api.errors import invalid_parameters
from service.api.list_vms_params import LIST_VMS, ListVmsQuery
from service.api.query_parameters import OFFSET, QueryParameters, owner
from service.console import pager
from service.console.render import chart, fragment

router = authorized_router(tags=["console"])

PAGE_SIZE = 50  # VMs in one page of the fleet's list (``limit`` changes it, up to 1000)
SERVERS_PAGE = 50
LISTED = 10  # stuck, quarantined and deepest-queue VMs shown
FLEET_READ_MODELS = ("vm_view", "volume_mounts", "job_view", "analytics")

NO_PARAMETERS = QueryParameters(scoped=False)
CHART = QueryParameters(owner("only this owner's VMs"))
SERVERS = QueryParameters(OFFSET, scoped=False)


@router.get("/console/fragments/session", response_class=HTMLResponse,
            openapi_extra=NO_PARAMETERS)
def session(request: Request) -> HTMLResponse:
    """Who the token is: its name and role (and owner), and whether the service runs in open
    local mode (no tokens configured)."""
    NO_PARAMETERS.parse(request).check()
    return fragment("session.html", principal=principal_of(request),
                    open_mode=request.app.state.tokens.open)


def _link(params: dict[str, Any], **changes: Any) -> str:
    """The fleet page's address with ``params`` changed (None drops a parameter)."""
    merged = {k: v for k, v in {**params, **changes}.items() if v is not None}
    return "/console" + (f"?{urlencode(merged)}" if merged else "")


@router.get("/console/fragments/fleet", response_class=HTMLResponse, openapi_extra=LIST_VMS)
def fleet(request: Request) -> HTMLResponse:
    """The fleet page: the same filters and paging as ``GET /vms`` (owner_uuid, server_uuid,
    state, ..., offset, limit; ``PAGE_SIZE`` VMs by default), every figure computed in SQL."""
    query = ListVmsQuery(request)
    vm_filter, page = query.vm_filter, query.page
    if "limit" not in query.params:
        page.limit = PAGE_SIZE
    services = services_of(request)
    head = services.projections.head()  # the page shows at least this: changes after it
    read_your_writes(request, services, FLEET_READ_MODELS, eventual=query.eventual)
    console = ConsoleQueries(services.db)
    try:
        vms, next_marker = services.vms.list(vm_filter, page)
    except InvalidMarkerError:
        raise invalid_parameters(request, [{"field": "marker", "code": "Invalid",
                                            "message": "Invalid marker"}]) from None
    states = console.states(vm_filter)
    total = sum(states.values())  # the filter's matches: HEAD /vms's count
    stuck, stuck_total = AnalyticsQueries(services.db).stuck(
        round(services.settings.stuck_transient_s * 1000), int(time.time() * 1000),
        owner_uuid=vm_filter.owner_uuid, limit=LISTED)
    params = {k: v for k, v in query.params.items() if k not in ("offset", "consistency")}
    role = principal_of(request).role
    scoped = role == OWNER
    return fragment(
        "fleet.html",
        # an analyst lists VMs but may not open one: its uuids are not links
        vm_pages=role in roles_for("GET", "/console/fragments/vms/{vm_uuid}"),
        filters={"owner_uuid": None if scoped else vm_filter.owner_uuid,
                 "server_uuid": vm_filter.server_uuid, "state": vm_filter.state},
        owner_scoped=scoped,
        states=states,
        chart_url="/console/fragments/fleet/chart" + (
            f"?{urlencode({'owner_uuid': vm_filter.owner_uuid})}"
            if vm_filter.owner_uuid and not scoped else ""),
        jobs=console.jobs_by_execution(vm_filter),
        queues=console.deepest_queues(vm_filter, LISTED),
        stuck=stuck, stuck_total=stuck_total,
        stuck_after_s=services.settings.stuck_transient_s,
        quarantined=console.in_state(vm_filter, VmState.QUARANTINED.value, LISTED),
        lag={name: head - position for name, position in services.projections.positions()
             .items()},
        head=head, live=_changes_counted(head, query.params.get("owner_uuid"),
                                         vm_filter.server_uuid),
        vms=vms, total=total, limit=page.limit,
        pager=pager.by_marker(lambda marker: _link(params, marker=marker), shown=len(vms),
                              total=total, next_marker=next_marker)
        if page.after is not None else
        pager.by_offset(lambda offset: _link(params, offset=offset or None), shown=len(vms),
                        offset=page.offset, size=page.limit, total=total),
    )


def _changes_counted(head: int, owner_uuid: str | None, server_uuid: str | None) -> str:
    """The changefeed whose changes the fleet page counts as not shown yet: those after log
    position ``head`` to the VMs of the page's owner and server (a change's owner and server
    are the VM's after it, as the page's filters match VMs as they are now), and a filtered
    server's own events. Not by the page's state: a change taking a VM out of that state has
    another state after it, so it would not be counted, though the page no longer shows it
    as it is; nor by brand, alias or tags, which the feed does not filter on.

    ``owner_uuid`` is the one the request asked for, not the one it is scoped to: ``/changes``
    scopes an owner token as the page does, so it counts the same VMs (none, for another
    owner's), and the scoped value for another owner's (``auth.NOBODY``) is no uuid, which it
    refused, and the counter vanished (console tester). The page builds only requests the API
    accepts."""
    wanted = {"after": head, "owner_uuid": owner_uuid, "server_uuid": server_uuid}
    return "/changes?" + urlencode({k: v for k, v in wanted.items() if v is not None})


@router.get("/console/fragments/fleet/chart", response_class=HTMLResponse,
            openapi_extra=CHART)
def fleet_chart(request: Request) -> HTMLResponse:
    """The fleet page's chart of VMs by state over time (``owner_uuid`` for one owner's),
    a fragment of its own: it reads every state change, so the rest of the page does not
    wait for it."""
    query = CHART.parse(request)
    query.check()
    services = services_of(request)
    read_your_writes(request, services, ("vm_view", "analytics"), eventual=query.eventual)
    over_time = ConsoleQueries(services.db).states_over_time(query.owner_uuid)
    return fragment("chart.html", chart=chart(over_time), owner=query.owner_uuid is not None)


@router.get("/console/fragments/servers", response_class=HTMLResponse, openapi_extra=SERVERS)
def servers(request: Request) -> HTMLResponse:
    """Servers by hostname (``offset``, ``SERVERS_PAGE`` a page): capacity from the claims
    the log records, used and free, and the VMs on each by state; and every network with
    its addresses in use and free (``GET /networks``)."""
    query = SERVERS.parse(request)
    offset = query.integer("offset", minimum=0) or 0
    query.check()
    services = services_of(request)
    read_your_writes(request, services, ("server_view", "analytics", "network_view"),
                     eventual=query.eventual)
    console = ConsoleQueries(services.db)
    page, total = console.servers_page(limit=SERVERS_PAGE, offset=offset)
    return fragment(
        "servers.html", servers=page, capacity=console.capacity(),
        networks=services.networks.list(),
        pager=pager.by_offset(lambda at: "/console/servers" + (f"?offset={at}" if at else ""),
                              shown=len(page), offset=offset, size=SERVERS_PAGE, total=total))
