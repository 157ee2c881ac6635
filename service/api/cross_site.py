"""Cross-site requests (api.md, "Contract: cross-site requests"): a request a browser sent on
behalf of a page of another origin may not change anything.

Found by a security tester: in open mode (no tokens) any page the user visited could create a
VM with ``fetch(..., {mode: 'no-cors', body: new Blob([...])})`` (no Content-Type, which the
API reads as JSON) or queue a stop with a plain HTML form. Browsers say who sent a request:
``Origin`` on every POST, PUT and DELETE and on a WebSocket upgrade, and ``Sec-Fetch-Site`` on
every request of a recent browser. A state-changing request (any method but GET, HEAD and
OPTIONS) and a WebSocket upgrade (the changefeed, which a foreign page could otherwise read:
the browser's same-origin rule does not cover WebSockets) is refused when either says another
site sent it. Clients that are no browser (curl, VMAPI's Node client) send neither header and
are unaffected; ``Host`` itself is not checked (the VMAPI client names the service by other
host names, docs/vmapi-compatibility.md).
"""

from __future__ import annotations

from starlette.types import Scope

from domain.json_input import cut, printable
from service.api.errors import CrossSiteRequestError

_SAFE = frozenset(("GET", "HEAD", "OPTIONS"))
# What Sec-Fetch-Site says of a request the user made (``none``: typed, a bookmark) or a page
# of the same origin made; ``same-site`` is another origin (another port or subdomain).
_OWN_SITES = frozenset((b"same-origin", b"none"))
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}
_HTTP_SCHEME = {"ws": "http", "wss": "https"}


def cross_site_refusal(scope: Scope, public_url: str | None = None
                       ) -> CrossSiteRequestError | None:
    """The refusal of an HTTP request (a WebSocket upgrade: any method) that a browser sent
    for another site, or None. One pass over the raw headers, and only for a method that may
    change something: a GET costs a set lookup. The origin of ``public_url`` (the
    ``VMLEDGER_PUBLIC_URL`` setting) is the service's own too: behind a TLS-terminating
    proxy the request is served as plain HTTP, and no forwarded header is read."""
    if scope["type"] == "http" and scope["method"] in _SAFE:
        return None
    origin = site = host = None
    for name, value in scope["headers"]:
        if name == b"origin":
            origin = value
        elif name == b"sec-fetch-site":
            site = value
        elif name == b"host":
            host = value
    if site is not None and site.lower() not in _OWN_SITES:
        return CrossSiteRequestError(f"Sec-Fetch-Site {_text(site)}")
    if origin is None:
        return None
    own = own_origin(scope, host)
    given = _normal(_text(origin))
    if given != _normal(own) and (public_url is None or given != _normal(origin_of(public_url))):
        return CrossSiteRequestError(f"Origin {_text(origin)} is not this service's ({own})")
    return None


def own_origin(scope: Scope, host: bytes | None) -> str:
    """The request's own origin as it was served: its scheme (``ws``/``wss`` read as
    ``http``/``https``, as a page's ``Origin`` has them) and its ``Host`` (else the address
    it came in on)."""
    scheme = scope.get("scheme", "http")
    scheme = _HTTP_SCHEME.get(scheme, scheme)
    if host is not None:
        where = _text(host)
    else:
        server = scope.get("server") or ("", None)
        where = server[0] if server[1] is None else f"{server[0]}:{server[1]}"
    return f"{scheme}://{where}"


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (its path left out)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.partition('/')[0]}"


def _normal(origin: str) -> str:
    """``origin`` lowercased, a default port dropped (``http://a:80`` is ``http://a``)."""
    origin = origin.strip().lower()
    scheme = origin.partition("://")[0]
    port = _DEFAULT_PORTS.get(scheme)
    return origin[:-len(port)] if port is not None and origin.endswith(port) else origin


def _text(value: bytes) -> str:
    """A header's value as a message may repeat it (cut, NUL escaped)."""
    return printable(cut(value.decode("latin-1")))
