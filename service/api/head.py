"""HEAD on every GET route: the GET's status and headers, no content (RFC 9110, 9.3.2).

FastAPI's GET routes do not answer HEAD, so ``curl -I`` of a VM got a 405; VMAPI has
``HEAD /vms/:uuid`` (HeadVm) beside ``HEAD /vms`` (CountVms, a route of its own here). A HEAD
that no route answers as HEAD but a GET route does is run as that GET, with the same checks
(its roles, an owner's visibility), and its body is dropped; ``Content-Length`` stays the
GET's, as RFC 9110 allows (but curl's: service/api/connection.py, which reads the request as
the HEAD it is). service/api/envelope.py runs it so and names the GET route in the access line
and metrics. The stream of changes (``/changes``, Server-Sent Events) answers HEAD
with a 405: its GET never ends, so its HEAD would hold the connection for nothing.
"""

from __future__ import annotations

from starlette.routing import Match, Router
from starlette.types import Scope

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
