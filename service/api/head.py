"""HEAD on every GET route: the GET's status and headers, no content (RFC 9110, 9.3.2).

FastAPI's GET routes do not answer HEAD, so ``curl -I`` of a VM got a 405; VMAPI has
``HEAD /vms/:uuid`` (HeadVm) beside ``HEAD /vms`` (CountVms, a route of its own here). A HEAD
that no route answers as HEAD but a GET route does is run as that GET, with the same checks
(its roles, an owner's visibility), and its body is dropped; ``Content-Length`` stays the
GET's, as RFC 9110 allows. The stream of changes (``/changes``, Server-Sent Events) answers HEAD
with a 405: its GET never ends, so its HEAD would hold the connection for nothing.
"""

from __future__ import annotations

from starlette.routing import Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: GET routes whose answer is an endless stream: no HEAD.
STREAMS = frozenset(("/changes",))


def answers(router: Router, scope: Scope, method: str) -> bool:
    """Whether a route of ``router`` fully matches ``scope``'s path with ``method``."""
    probe = {**scope, "method": method}
    return any(route.matches(probe)[0] is Match.FULL for route in router.routes)


def head_as_get(router: Router, scope: Scope) -> bool:
    """Whether a HEAD of ``scope``'s path is answered by running its GET route."""
    return (scope["path"] not in STREAMS and not answers(router, scope, "HEAD")
            and answers(router, scope, "GET"))


class HeadAsGet:
    """ASGI middleware: a HEAD that only a GET route answers runs as that GET, bodiless.

    Inside ``ConnectionHeaders``, which must still see the HEAD (curl's HEAD answers have no
    ``Content-Length``); the matched route is copied back to the outer scope so the access log
    and metrics name it.
    """

    def __init__(self, app: ASGIApp, *, router: Router):
        self.app = app
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "HEAD"
                or not head_as_get(self.router, scope)):
            await self.app(scope, receive, send)
            return
        as_get = {**scope, "method": "GET"}

        async def bodiless(message: Message) -> None:
            if message["type"] == "http.response.start" and "route" in as_get:
                scope["route"] = as_get["route"]
            elif message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app(as_get, receive, bodiless)
