"""The order the app tries its routes in (service/api/app.py): the commands first, for speed,
which is safe only while no two routes answer the same method and path."""

from __future__ import annotations

import re
import uuid

from starlette.routing import Match

from service import console
from service.api.app import api_routers, create_app


def _routes(settings) -> list[tuple[str, str]]:
    # This FastAPI keeps included routers nested (app.routes lists them, not their routes),
    # so the routes are walked router by router, as create_app includes them.
    found = []
    for router in (*api_routers(settings), *console.ROUTERS):
        for route in router.routes:
            for method in getattr(route, "methods", None) or ():
                found.append((method, re.sub(r"\{[^}]+\}", "{}", route.path)))
    return found


def test_no_two_routes_answer_the_same_method_and_path(settings):
    routes = _routes(settings)
    assert ("POST", "/vms/{}") in routes and ("GET", "/vms/{}") in routes
    assert len(routes) == len(set(routes))


def test_a_vm_command_is_matched_by_the_first_router_tried(settings):
    app = create_app(settings)
    scope = {"type": "http", "method": "POST", "path": f"/vms/{uuid.uuid4()}",
             "root_path": "", "query_string": b"", "headers": [], "app": app}
    included = [route for route in app.router.routes if route.matches(scope)[0] != Match.NONE
                or hasattr(route, "original_router")]
    assert included[0].matches(scope)[0] == Match.FULL
