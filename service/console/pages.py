"""The console's pages and assets: an ASGI middleware in front of the app that answers ``GET``
(and ``HEAD``) of each page's HTML shell and of ``/console/static/*`` itself.

Neither holds data: a shell is the same for every caller (navigation, the sign-in form, and the
address of the fragment its script fetches with the caller's token), so they are served without
a token, before the app's authentication. Everything else goes on to the app. Every asset is
vmledger's own file, and the pages' ``Content-Security-Policy`` lets a page load nothing from
anywhere else (no CDN, no inline script or style); every answer under ``/console``, the
fragments' and their errors' too, carries the same protection. A path with a trailing ``/`` is
served as without it, as the API serves every path.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote
from uuid import UUID

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api import errors
from service.api.connection import send_fixed
from service.api.headers import with_request_id
from service.console.render import render

STATIC = Path(__file__).parent / "static"
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".svg": "image/svg+xml", ".png": "image/png"}
# What every answer under /console carries, the fragments' and their errors' too (the HTML a
# page's script inserts is the page's): no framing (X-Frame-Options for browsers that predate
# frame-ancestors), no sniffing, no referrer.
PROTECTION = [
    (b"content-security-policy",
     (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
      b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
_PROTECTED = {name for name, _ in PROTECTION}
# A shell or an asset is revalidated; a fragment says no-store itself (render.fragment).
SECURITY_HEADERS = [*PROTECTION, (b"cache-control", b"no-cache")]
# page path -> (the page's name, its fragment's path, its title: what a tab, a bookmark or
# the history names it; every page was "vmledger console")
_PAGES = {
    "/console": ("fleet", "/console/fragments/fleet", "Fleet"),
    "/console/servers": ("servers", "/console/fragments/servers", "Servers and networks"),
    "/console/audit": ("audit", "/console/fragments/audit", "Audit"),
}
_VM_PAGE = re.compile(r"^/console/vms/([0-9A-Za-z-]{1,64})$")


# The console's own paths that are the API's (behind the token): an unknown one is no page.
# (``/console/static/`` is this middleware's: a missing asset is the 404 page whatever the
# token, as a browser sends none for an asset; it had been the API's 401.)
_API_PATHS = ("/console/fragments/",)


def without_slash(path: str) -> str:
    """``path`` as it is served: one trailing ``/`` dropped (``/console/servers/`` is
    ``/console/servers``), as the API serves every path (``envelope.without_trailing_slash``;
    docs/api.md, "Contract: conventions")."""
    return path[:-1] if len(path) > 1 and path.endswith("/") else path


def _names_a_uuid(text: str) -> bool:
    """Whether ``text`` may be a VM's uuid: what the API's lookup reads as one (any case,
    with or without hyphens); anything else names no VM, whatever the token."""
    try:
        UUID(text)
    except ValueError:
        return False
    return True


def page_of(path: str) -> tuple[str, str, str] | None:
    """The (page name, fragment path, title) of a console page path (its trailing ``/``
    already dropped), or None. A VM's page is one only for a text that may be a uuid:
    ``/console/vms/garbage`` is no page (404), which the shell can tell without a token,
    where whether a uuid names a VM is the fragment's to say, behind the token."""
    if path in _PAGES:
        return _PAGES[path]
    match = _VM_PAGE.match(path)
    if match and _names_a_uuid(match.group(1)):
        return "vm", f"/console/fragments/vms/{quote(match.group(1))}", f"VM {match.group(1)}"
    return None


def names_no_page(path: str) -> bool:
    """``path`` is under ``/console/`` but names no page, and is none of the API's paths
    there: a mistyped link or a missing asset, answered with the console's own 404 page,
    which holds nothing and so needs no token (it had been the API's 401, JSON shown bare
    in a browser). Call it for a path that is no asset."""
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
        if not scope["path"].startswith("/console"):  # every API request: test cheaply
            await self.app(scope, receive, send)
            return
        path = without_slash(scope["path"])
        protected = protecting(send)
        if scope["method"] not in ("GET", "HEAD"):
            if path in self.assets or page_of(path):
                await errors.get_or_head_only()(  # api.md, "Errors"
                    scope, receive, with_request_id(scope, protected))
            else:
                await self.app(scope, receive, protected)
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
        else:  # the fragments (the API's answers)
            await self.app(scope, receive, protected)
            return
        await send_fixed(scope, with_request_id(scope, send), body,
                         [(b"content-type", content_type.encode()), *SECURITY_HEADERS])


def protecting(send: Send) -> Send:
    """``send`` for an answer the app gives under ``/console`` (a fragment, or the API's
    error body for one): its head gains the pages' ``PROTECTION`` headers, replacing any of
    the same names (they had none: a fragment is HTML inserted into a page)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                *((name, value) for name, value in message.get("headers", ())
                  if name.lower() not in _PROTECTED), *PROTECTION]
        await send(message)

    return sending
