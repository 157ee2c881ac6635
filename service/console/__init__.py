"""The web console at ``/console`` (docs/console.md): read-only pages for auditors and analysts,
served by the same process as the API.

Two halves:

- **Pages and assets** (``pages.py``): the HTML shell of each page and its CSS and JavaScript,
  which hold no data and so are served to anyone, without a token, by an ASGI middleware in
  front of the app (a browser navigating to a page cannot send an ``Authorization`` header).
- **Fragments** (``routes_fleet.py``, ``routes_vm.py``): server-rendered HTML pieces under
  ``/console/fragments/``, API routes like any other, with the same bearer tokens, the roles of
  ``service/api/auth.py:ROUTE_ROLES`` and the same owner scoping. The shell's script keeps the
  token the user typed in ``sessionStorage`` (this tab only, gone when it closes) and fetches
  the fragments with ``Authorization: Bearer``.
"""

from __future__ import annotations

from fastapi import FastAPI

from service.console import routes_fleet, routes_vm
from service.console.pages import ConsolePages


# The fragments' routers
ROUTERS = (routes_fleet.router, routes_vm.router)


def install(app: FastAPI) -> None:
    """Serve the console from ``app``: its fragment routes, and its pages and assets in front
    of every other middleware (call it last, after the app's own middleware is added)."""
    for router in ROUTERS:
        app.include_router(router)
    app.add_middleware(ConsolePages)
