"""The FastAPI application factory: ``create_app(settings)`` builds everything, and nothing
connects to a database at import time."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute, APIWebSocketRoute

from projections.collector import LongLivedFrozen, collect_young_less_often
from service import console, metrics
from service.api import (
    error_handlers,
    routes_agents,
    routes_changefeed,
    routes_changes,
    routes_jobs,
    routes_networks,
    routes_ops,
    routes_servers,
    routes_sim,
    routes_stats,
    routes_vm_commands,
    routes_vms,
    routes_volumes,
    serving,
    upgrades,
)
from service.api.auth import AuthorizedRoute, authorize
from service.api.connection import KEEP_ALIVE_S
from service.api.docs_page import ApiDocs
from service.api.envelope import Envelope
from service.api.openapi import declare_schema
from service.api.tokens import TokenFileError, Tokens
from service.container import Services
from service.logs import gather_only_what_lines_show
from service.projector_presence import warn_if_nothing_projects
from service.settings import Settings

log = logging.getLogger(f"vmledger.{__name__}")

# FastAPI's native OpenTelemetry, every signal off (FastAPI 0.142 and newer)
NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False}


def create_app(
    settings: Settings | None = None,
    *,
    services: Services | None = None,
    background: bool | None = None,
    frozen: LongLivedFrozen | None = None,
) -> FastAPI:
    """The HTTP API over ``services`` (built from ``settings`` in the lifespan if not given).

    ``background`` runs the projection runner and job worker in this process; by default
    ``settings.embedded_runners``, which defaults to yes on SQLite (embedded mode).
    ``frozen``, given only where the process is the app's (``create_served_app``), is ticked
    every second while the app runs.
    """
    settings = settings or (services.settings if services else Settings())
    tokens = Tokens.from_settings(settings)  # a bad entry stops start-up, naming it

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        own = services is None
        app.state.services = services or Services.build(settings)
        app.state.metrics_registry = metrics.fleet_registry(app.state.services.jobs.gauges)
        run_here = background
        if run_here is None:
            run_here = settings.embedded_runners
        if run_here is None:
            run_here = settings.backend == "sqlite"
        if run_here:
            app.state.services.start_background()
        elif background is None:  # serve's own choice, by the settings (not a test's)
            warn_if_nothing_projects(app.state.services)
        ticking = asyncio.create_task(_tick_every_second(frozen)) if frozen else None
        try:
            # The hook our uvicorn server awaits before it closes the connections itself
            yield {serving.BEFORE_SHUTDOWN: lambda: routes_changes.end_change_streams(app.state)}
        finally:
            if ticking is not None:
                ticking.cancel()
            await routes_changes.close_change_hub(app.state)
            if own:
                app.state.services.close()

    app = FastAPI(
        title="vmledger",
        version="2.0.0",
        description="An event-sourced VM lifecycle service with Triton VMAPI's shapes.",
        lifespan=lifespan,
        # unless asked for, not even the check for OpenTelemetry providers on each request
        # (docs/operations.md, VMLEDGER_OPENTELEMETRY; docs/performance.md)
        telemetry=None if settings.opentelemetry else NO_TELEMETRY,
        # api.md: a body with no Content-Type (or an empty one) is read as JSON, as VMAPI's
        # restify reads it; FastAPI (0.132 on) refuses it unless told not to be strict.
        # Every router included inherits the app's setting.
        strict_content_type=False,
        # served by ApiDocs, in front of the token check and with no CDN (docs/api.md)
        openapi_url=None, docs_url=None, redoc_url=None,
        # no 307 to the path without its slash: its Location was built from the client's
        # Host header, with no error body; the envelope serves /vms/ as /vms (api.md)
        redirect_slashes=False,
    )
    app.state.tokens = tokens
    declare_schema(app)
    error_handlers.install(app)
    routers = api_routers(settings)
    for router in routers:
        app.include_router(router)
    upgrades.install(app)  # an upgrade no route takes: 404 with the error body

    # Our one layer: the request id, log scope, metrics and checks before any route, the
    # database wait bound, HEAD as GET, Connection and Keep-Alive (VMAPI's rules for curl).
    app.add_middleware(Envelope, router=app.router, tokens=tokens,
                       max_body_bytes=settings.max_body_bytes, keep_alive_s=KEEP_ALIVE_S,
                       db_wait_s=settings.postgres_request_wait_s,
                       public_url=settings.public_url)
    app.add_middleware(ApiDocs, schema=app.openapi, title=app.title)
    console.install(app)  # last: its pages and assets are served before the token check
    refuse_unauthorized_routes([*routers, *console.ROUTERS])
    return app


def api_routers(settings: Settings) -> list[APIRouter]:
    """The API's routers (the console's are ``console.ROUTERS``), in the order a request's
    route is found by trying them.

    The commands first, then the VM reads: each router passed costs FastAPI (0.165) 3-6 µs.
    Finding POST /vms/{uuid} took 20.6 µs with /ping's router and the reads' before it,
    7.7 µs now; GET /vms/{uuid} 16.3 µs instead of 13.0. The order decides nothing else: no
    two routes answer the same method and path (tests/api/test_route_order.py), and a 405
    names the methods of every route of its path (error_handlers.allowed_methods)."""
    routers = [routes_vm_commands.router, routes_vms.router, routes_ops.router,
               routes_jobs.router, routes_servers.router, routes_agents.router,
               routes_stats.router, routes_volumes.router, routes_changes.router,
               routes_changefeed.router, routes_networks.router]
    if settings.driver == "simulated":
        routers.append(routes_sim.router)
    return routers


def refuse_unauthorized_routes(routers: list[APIRouter]) -> None:
    """Raise ``TypeError`` naming a route of ``routers`` that would be served without
    ``authorize`` (service/api/auth.py): an HTTP route not made by ``authorized_router``, or
    a WebSocket route without ``authorize`` as its dependency."""
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute) and not isinstance(route, AuthorizedRoute):
                raise TypeError(f"{route.path} is not an AuthorizedRoute: make its router "
                                "with service.api.auth.authorized_router")
            if isinstance(route, APIWebSocketRoute) and not any(
                    dependency.call is authorize for dependency in route.dependant.dependencies):
                raise TypeError(f"WebSocket {route.path} does not depend on authorize")


def create_served_app() -> FastAPI:
    """The app of a ``vmledger serve`` process, whose heap is all the app's: ``create_app``
    with the cyclic garbage collector made to walk less (``projections.collector``: young
    collections ten times rarer, the long-lived objects such as the aggregate cache of up to
    ``VMLEDGER_AGGREGATE_CACHE_SIZE`` folded VMs frozen), and log records that gather only
    what the lines show (``logs.gather_only_what_lines_show``: uvicorn, not
    ``setup_logging``, configures the logging of each process). The collector's share was
    about 6 % of the API's CPU under the P1 load (docs/performance.md, "The garbage
    collector"). Tests build apps with ``create_app``: their process is pytest's, whose
    garbage is collected as usual."""
    collect_young_less_often()
    gather_only_what_lines_show()
    return create_app(frozen=LongLivedFrozen())


async def _tick_every_second(frozen: LongLivedFrozen) -> None:
    while True:
        await asyncio.sleep(1.0)
        frozen.tick()


def refuse_open_bind_without_tokens(settings: Settings, host: str) -> None:
    """Check the tokens before serving: bad tokens stop start-up with a message naming the
    entry, and with no tokens configured only loopback is allowed (api.md, "Roles").

    Raises ``SystemExit(2)``, the reason on stderr, as for every setting refused.
    """
    try:
        Tokens.from_settings(settings)
    except TokenFileError as error:  # a bad setting: status 2, as pydantic's are
        print(f"vmledger: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    if settings.tokens_configured:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:  # a setting refused, as the others are: status 2 (operator tester)
        print(f"vmledger: refusing to listen on {host}: no tokens are configured "
              "(VMLEDGER_TOKENS_FILE or VMLEDGER_TOKENS), so only loopback addresses "
              "(127.0.0.1, ::1, localhost) are allowed", file=sys.stderr)
        raise SystemExit(2)
