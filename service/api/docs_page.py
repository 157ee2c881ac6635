"""The API's interactive docs (Swagger UI at ``/docs``) and its schema (``/openapi.json``),
answered by an ASGI middleware in front of the app, without a token and without the internet.

Neither holds data: the page is the same for everyone and the schema describes the API, not
the fleet, so both are served before the app's authentication, as the console's pages are
(a browser opening ``/docs`` cannot send an ``Authorization`` header, and the page fetches the
schema before the user can give a token). The page's script and style are Swagger UI's own
bundle as the ``fastapi-offline`` package ships it, served from ``/docs/static/``, so the
page works on a machine with no route to a CDN. Calls made from the page ("Try it out") are
API requests like any other: the schema declares the bearer token, which the page's
"Authorize" button adds to them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import orjson
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api import errors
from service.api.connection import send_fixed
from service.api.headers import with_request_id

DOCS = "/docs"
SCHEMA = "/openapi.json"
_STATIC = f"{DOCS}/static"
# Swagger UI's files as fastapi-offline packages them (its ``static`` folder)
_BUNDLE = files("fastapi_offline") / "static"
_ASSET_TYPES = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
                "swagger-ui.css": "text/css; charset=utf-8",
                "favicon.png": "image/png"}


@functools.cache
def _asset(name: str) -> bytes:
    """Swagger UI's file ``name``, read at the first request for it (not at each app's
    creation: the bundle is 1.5 MB)."""
    return (_BUNDLE / name).read_bytes()


class ApiDocs:
    """Answers ``GET`` and ``HEAD`` of ``/docs``, its assets and ``/openapi.json`` (any other
    method 405 ``BadMethod``); passes every other request to ``app``.

    ``schema`` is the app's ``openapi`` method (which builds the schema once); ``title`` is
    the page's title."""

    def __init__(self, app: ASGIApp, *, schema: Callable[[], dict[str, Any]], title: str):
        self.app = app
        page = get_swagger_ui_html(
            openapi_url=SCHEMA, title=f"{title}: API docs",
            swagger_js_url=f"{_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{_STATIC}/favicon.png")
        # path -> (the body, made at the first request for it; its content type)
        self.answers: dict[str, tuple[Callable[[], bytes], str]] = {
            DOCS: (lambda: page.body, "text/html; charset=utf-8"),
            SCHEMA: (functools.cache(lambda: orjson.dumps(schema())), "application/json"),
            **{f"{_STATIC}/{name}": (functools.partial(_asset, name), content_type)
               for name, content_type in _ASSET_TYPES.items()}}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = self.answers.get(scope.get("path")) if scope["type"] == "http" else None
        if answer is None:
            await self.app(scope, receive, send)
            return
        send = with_request_id(scope, send)
        if scope["method"] not in ("GET", "HEAD"):
            await errors.get_or_head_only()(scope, receive, send)  # api.md, "Errors"
            return
        body, content_type = answer
        await send_fixed(scope, send, body(), [(b"content-type", content_type.encode())])
