"""Every database call made for an HTTP request waits a bounded time for its answer
(``VMLEDGER_POSTGRES_REQUEST_WAIT_S``; service/db_limits.py, ``BoundedConnection``): a pure ASGI
middleware, so the bound holds for the route's own thread (Starlette copies the context into
it) and for nothing the process runs outside requests (its projection runner, its worker)."""

from __future__ import annotations

from typing import Any

from service.db_limits import request_waits_bounded


class BoundDatabaseWaits:
    """ASGI middleware: HTTP requests' database waits end after ``seconds``."""

    def __init__(self, app: Any, *, seconds: float):
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with request_waits_bounded(self.seconds):
            await self.app(scope, receive, send)
