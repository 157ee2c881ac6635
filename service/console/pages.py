"""The console's pages and assets: an ASGI middleware in front of the app that answers ``GET``
(and ``HEAD``) of each page's HTML shell and of ``/console/static/*`` itself.

Neither holds data: a shell is the same for every caller (navigation, the sign-in form, and the
address of the fragment its script fetches with the caller's token), so they are served without
a token, before the app's authentication. Everything else goes on to the app. Every asset is
vmledger's own file, and the pages' ``Content-Security-Policy`` lets a page load nothing from
anywhere else (no CDN, no inline script or style).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

from starlette.types import ASGIApp, Receive, Scope, Send

from service.api import errors
from service.api.connection import send_fixed
from service.api.headers import with_request_id
from service.console.render import render

STATIC = Path(__file__).parent / "static"
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".svg": "image/svg+xml", ".png": "image/png"}
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
     b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]
# page path -> (the page's name, its fragment's path, its title: what a tab, a bookmark or
# the history names it; every page was "vmledger console")
_PAGES = {
    "/console": ("fleet", "/console/fragments/fleet", "Fleet"),
    "/console/": ("fleet", "/console/fragments/fleet", "Fleet"),
    "/console/servers": ("servers", "/console/fragments/servers", "Servers and networks"),
    "/console/audit": ("audit", "/console/fragments/audit", "Audit"),
}
_VM_PAGE = re.compile(r"^/console/vms/([0-9A-Za-z-]{1,64})$")


# The console's own paths that are the API's (behind the token): an unknown one is no page.
_API_PATHS = ("/console/fragments/", "/console/static/")


def page_of(path: str) -> tuple[str, str, str] | None:
    """The (page name, fragment path, title) of a console page path, or None."""
    if path in _PAGES:
        return _PAGES[path]
    match = _VM_PAGE.match(path)
    if match:
        return "vm", f"/console/fragments/vms/{quote(match.group(1))}", f"VM {match.group(1)}"
    return None


def names_no_page(path: str) -> bool:
    """``path`` is under ``/console/`` but names no page, and is none of the API's paths
    there: a mistyped link, answered with the console's own 404 page, which holds nothing
    and so needs no token (it had been the API's 401, JSON shown bare in a browser)."""
    return (path.startswith("/console/") and not path.startswith(_API_PATHS)
            and page_of(path) is None)


def _assets() -> dict[str, tuple[bytes, str]]:
    return {f"/console/static/{p.name}": (p.read_bytes(), _TYPES[p.suffix])
            for p in STATIC.iterdir() if p.suffix in _TYPES}


class ConsolePages:
    """Answers the console's shells and assets; passes every other request to ``app``."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self.assets = _assets()  # a few small files, read once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] not in ("GET", "HEAD"):  # every command passes here: test cheaply
            if path.startswith("/console") and (path in self.assets or page_of(path)):
                await errors.get_or_head_only()(  # api.md, "Errors"
                    scope, receive, with_request_id(scope, send))
            else:
                await self.app(scope, receive, send)
            return
        asset = self.assets.get(path)
        page = page_of(path)
        if asset is not None:
            body, content_type = asset
        elif page is not None:
            query = scope.get("query_string", b"").decode("latin-1")
            fragment = page[1] + (f"?{query}" if query else "")
            body = render("shell.html", page=page[0], fragment=fragment, title=page[2]).encode()
            content_type = "text/html; charset=utf-8"
        elif names_no_page(path):
            body = render("shell.html", page="missing", fragment=None, title="Not found").encode()
            await send_fixed(scope, with_request_id(scope, send), body, [
                (b"content-type", b"text/html; charset=utf-8"), *SECURITY_HEADERS], status=404)
            return
        else:
            await self.app(scope, receive, send)
            return
        await send_fixed(scope, with_request_id(scope, send), body,
                         [(b"content-type", content_type.encode()), *SECURITY_HEADERS])

